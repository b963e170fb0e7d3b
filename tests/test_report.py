"""`--report MIGRATION.md` (with `--verify-json`) through the CLI, and the renderer on synthetic runs."""
from __future__ import annotations

import json
import re

import pytest

from migrate.report import render_report, verify_section

from test_cli_helpers import cli, copy_fixture, finding_lines
from test_formats import synthetic_run


def test_report_after_rewrite_has_counts_files_followups_launch_and_verification(tmp_path):
    repo = copy_fixture("legacy_repo", tmp_path)
    verify = tmp_path / "verify.json"
    verify.write_text(json.dumps({
        "verdict": "pass", "passed": True, "steps": [
            {"step": 1, "original": 2.30, "migrated": 2.30, "rel_diff": 0.0},
            {"step": 2, "original": 2.10, "migrated": 2.1000001, "rel_diff": 4.7e-8}],
        "tolerance": 1e-6, "device": "cpu", "extra": {"nested": [1, 2]}}))
    report = tmp_path / "MIGRATION.md"
    r = cli(["rewrite", "--report", str(report), "--verify-json", str(verify), "."], cwd=repo)
    assert r.returncode == 1, r.stderr
    text = report.read_text(encoding="utf-8")
    assert text.startswith("# apex2amp migration report")
    scanned = re.search(r"\| files scanned \| (\d+) \|", text)
    assert scanned and int(scanned.group(1)) >= 3
    changed = [ln.split(" ", 1)[1] for ln in r.stdout.splitlines() if ln.startswith("rewrote ")]
    for path in changed:
        assert f"### `{path}`" in text
    assert "**Changes made:**" in text
    # every printed finding shows up in the report with its code and (rewritten) line number
    for f in finding_lines(r.stdout):
        assert f"line {f['line']}: `{f['code']}`" in text, f
    to_review = int(re.search(r"(\d+) need review", r.stdout).group(1))
    boxes = text.count("- [ ] ")  # manual follow-ups are checkboxes (info notes are listed without one)
    assert boxes <= to_review
    if "**Notes:**" not in text:
        assert boxes == to_review
    if "torchrun" in r.stdout:
        assert "**Launch with torchrun:**" in text and "```sh\ntorchrun" in text
    assert "## Verification" in text and "**PASS**" in text
    assert "| step | original | migrated | rel_diff |" in text
    assert "- tolerance: 1e-06" in text
    assert "nested" not in text


def test_report_in_check_mode_shows_pending_diff_and_original_lines(tmp_path):
    repo = copy_fixture("cuda_amp_only", tmp_path)
    report = tmp_path / "r.md"
    r = cli(["check", "--report", str(report), "."], cwd=repo)
    assert r.returncode == 1
    text = report.read_text(encoding="utf-8")
    assert "Nothing was written" in text and "**Changes pending (nothing written):**" in text
    assert "```diff\n--- a/train_native.py" in text
    assert "## Verification" not in text


def test_report_of_synthetic_run():
    text = render_report(synthetic_run(), mode="check")
    assert "| files with errors | 1 |" in text and "| suppressed (`# apex2amp: ignore`) | 1 |" in text
    assert "**Not processed:** syntax error at line 3, column 0" in text
    assert "- [ ] line 3: `A2A999` multi line message" in text  # newlines cannot break the list
    assert "- [ ] cell 4, line 2:" in text
    assert "suppressed" not in text.split("## Files", 1)[1]
    assert "**Notes:**" in text and "file: `" in text
    assert "```sh\ntorchrun --nproc_per_node=gpu train.py\n```" in text
    assert "### `clean.py`" not in text


@pytest.mark.parametrize("data,verdict", [
    ({"passed": False, "reasons": ["step 3 differs by 5e-2"]}, "**FAIL**"),
    ({"verdict": "fail", "per_step": [{"step": 1, "loss": [1, 2]}]}, "**FAIL**"),
    ({"steps": "not a list", "passed": "yes"}, "**UNKNOWN**"),
    ({}, "**UNKNOWN**"),
])
def test_verify_section_reads_any_shape_defensively(data, verdict):
    text = "\n".join(verify_section(data))
    assert verdict in text
    if data.get("reasons"):
        assert "step 3 differs" in text


def test_unreadable_verify_json_is_reported_not_fatal(tmp_path):
    repo = copy_fixture("cuda_amp_only", tmp_path)
    bad = tmp_path / "verify.json"
    bad.write_text("[1, 2")
    report = tmp_path / "r.md"
    r = cli(["check", "--report", str(report), "--verify-json", str(bad), "."], cwd=repo)
    assert r.returncode == 1
    assert "Verification results unavailable" in report.read_text(encoding="utf-8")
