"""--format json/sarif/github through the CLI, and the renderers on synthetic runs."""
from __future__ import annotations

import json
import os
import re

import jsonschema
import pytest

import codemods.registry  # noqa: F401 - registers every rule in RULES (run alone, nothing else would)
from codemods.base import FIX, INFO, RULES, WARNING, Finding
from migrate.engine import FileResult, RunResult
from migrate.formats import render

from test_cli_helpers import REPO, cli, copy_fixture, tree_digest

SCHEMA_PATH = os.path.join(REPO, "migrate", "schemas", "sarif-schema-2.1.0.json")


def sarif_validator():
    with open(SCHEMA_PATH, encoding="utf-8") as fh:
        schema = json.load(fh)
    return jsonschema.Draft4Validator(schema, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER)


def assert_valid_sarif(doc):
    errors = sorted(sarif_validator().iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message[:300]}" for e in errors[:10])


def synthetic_run() -> RunResult:
    """Two files: one changed with fixed/open/ignored/notebook findings, one that failed to parse."""
    import codemods.registry  # noqa: F401 - fills RULES when this test runs alone
    code = sorted(RULES)[0]
    old = "import a\nx = 1\ny = 2\n"
    new = "import b\nx = 1\ny = 3\nz = 4\n"
    findings = [
        Finding(code, "rewrote a, with: colon, comma and 100% effort", line=1, col=1, severity=FIX, fixed=True,
                new_line=1),
        Finding("A2A999", "multi\nline message", line=3, col=0, severity=WARNING),
        Finding(code, "suppressed", line=2, col=5, severity=WARNING, ignored=True),
        Finding(code, "file level note", line=0, col=0, severity=INFO),
        Finding(code, "in a notebook cell", line=2, col=3, severity=WARNING, cell=4),
    ]
    return RunResult(files=[
        FileResult("dir, with: odd/ü name.py", "python", old, new, findings,
                   launch_notes=[{"path": "train.py", "command": "torchrun --nproc_per_node=gpu train.py",
                                  "multi_node": "torchrun --nnodes=2 ... train.py"}]),
        FileResult("bad.py", "python", error="syntax error at line 3, column 0"),
        FileResult("clean.py", "python", "x = 1\n", "x = 1\n"),
    ], scanned=3)


def test_json_schema_fields_are_stable(tmp_path):
    repo = copy_fixture("legacy_repo", tmp_path)
    r = cli(["check", "--format", "json", "."], cwd=repo)
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert set(doc) == {"version", "tool", "mode", "files", "summary"}
    assert doc["version"] == 1 and doc["mode"] == "check" and doc["tool"]["name"] == "apex2amp"
    assert set(doc["summary"]) == {"scanned", "changed", "written", "errors", "findings", "open", "ignored",
                                   "exit_code"}
    assert set(doc["summary"]["findings"]) == {"fix", "warning", "info"}
    assert doc["summary"]["exit_code"] == r.returncode
    assert doc["files"], "an apex trainer must produce a change or a finding"
    for f in doc["files"]:
        assert set(f) == {"path", "kind", "changed", "written", "error", "findings", "launch_notes"}
        assert not os.path.isabs(f["path"])
        lines = [x["line"] for x in f["findings"]]
        assert lines == sorted(lines)
        for x in f["findings"]:
            assert set(x) == {"code", "name", "severity", "fixed", "ignored", "message", "line", "col",
                              "original_line", "new_line", "cell"}
            assert x["code"] in RULES and x["severity"] in ("fix", "warning", "info")
    total = sum(len(f["findings"]) for f in doc["files"])
    assert total == sum(doc["summary"]["findings"].values())
    assert doc["summary"]["changed"] == sum(f["changed"] for f in doc["files"])


def test_output_file_for_json_and_sarif(tmp_path):
    repo = copy_fixture("cuda_amp_only", tmp_path)
    before = tree_digest(repo)
    out = tmp_path / "out.sarif"
    r = cli(["check", "--format", "sarif", "--output", str(out), "."], cwd=repo)
    assert r.returncode == 1 and r.stdout == ""
    assert tree_digest(repo) == before
    doc = json.loads(out.read_text())
    assert_valid_sarif(doc)
    r2 = cli(["rewrite", "--format", "json", "-o", str(tmp_path / "o.json"), "."], cwd=repo)
    assert r2.returncode == 1 and r2.stdout == ""
    doc2 = json.loads((tmp_path / "o.json").read_text())
    assert doc2["mode"] == "rewrite" and doc2["summary"]["written"] >= 1


def test_sarif_from_cli_validates_and_carries_rules_and_fixes(tmp_path):
    repo = copy_fixture("legacy_repo", tmp_path)
    copy_fixture("broken", repo)
    r = cli(["check", "--format", "sarif", "."], cwd=repo)
    assert r.returncode == 2
    doc = json.loads(r.stdout)
    assert_valid_sarif(doc)
    run = doc["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert [x["id"] for x in rules] == sorted(RULES)
    for x in rules:
        assert x["shortDescription"]["text"] and x["help"]["text"] and x["help"]["markdown"]
    assert run["results"]
    for res in run["results"]:
        assert rules[res["ruleIndex"]]["id"] == res["ruleId"]
        loc = res["locations"][0]["physicalLocation"]
        assert loc["artifactLocation"]["uriBaseId"] == "%SRCROOT%"
        assert not loc["artifactLocation"]["uri"].startswith("/")
    # fixes of a pending rewrite reproduce the rewritten file exactly
    fixed = [res for res in run["results"] if res.get("fixes")]
    assert fixed
    res = fixed[0]
    uri = res["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    with open(os.path.join(repo, uri), encoding="utf-8") as fh:
        text = fh.read()
    for rep in sorted(res["fixes"][0]["artifactChanges"][0]["replacements"],
                      key=lambda x: -x["deletedRegion"]["charOffset"]):
        off, n = rep["deletedRegion"]["charOffset"], rep["deletedRegion"]["charLength"]
        text = text[:off] + rep.get("insertedContent", {}).get("text", "") + text[off + n:]
    cli(["rewrite", uri], cwd=repo)
    with open(os.path.join(repo, uri), encoding="utf-8") as fh:
        assert fh.read() == text
    notes = run["invocations"][0]["toolExecutionNotifications"]
    assert run["invocations"][0]["executionSuccessful"] is False
    assert any("bad_syntax.py" in n["message"]["text"] for n in notes)


@pytest.mark.parametrize("mode", ["check", "rewrite"])
@pytest.mark.parametrize("show_ignored", [False, True])
def test_sarif_of_synthetic_run_validates(mode, show_ignored):
    run = synthetic_run()
    if mode == "rewrite":
        run.files[0].written = True
    doc = json.loads(render(run, "sarif", mode=mode, show_ignored=show_ignored))
    assert_valid_sarif(doc)
    results = doc["runs"][0]["results"]
    assert any(r.get("suppressions") for r in results) == show_ignored
    assert any(r.get("fixes") for r in results) == (mode == "check")
    unknown = [r for r in results if r["ruleId"] == "A2A999"]
    assert unknown and "ruleIndex" not in unknown[0]


def test_json_of_synthetic_run():
    doc = json.loads(render(synthetic_run(), "json", mode="check", show_ignored=False))
    paths = [f["path"] for f in doc["files"]]
    assert paths == ["dir, with: odd/ü name.py", "bad.py"]
    assert doc["files"][1]["error"].startswith("syntax error")
    assert not any(x["ignored"] for x in doc["files"][0]["findings"])
    assert doc["summary"]["ignored"] == 1 and doc["summary"]["exit_code"] == 2
    assert doc["files"][0]["launch_notes"][0]["command"].startswith("torchrun")
    shown = json.loads(render(synthetic_run(), "json", mode="check", show_ignored=True))
    assert any(x["ignored"] for x in shown["files"][0]["findings"])


GH_RX = re.compile(r"^::(warning|notice|error) (file=[^,:]+(?:,line=\d+)?(?:,col=\d+)?,title=[^:,]+)::(.*)$")


def test_github_annotations_escape_and_levels():
    out = render(synthetic_run(), "github", mode="check").splitlines()
    cmds = [ln for ln in out if ln.startswith("::")]
    assert all(GH_RX.match(ln) for ln in cmds), cmds
    assert any(ln.startswith("::error file=bad.py") for ln in cmds)
    assert any("file=dir%2C with%3A odd/ü name.py,line=1,col=1" in ln for ln in cmds)
    assert any("100%25 effort" in ln for ln in cmds)
    assert any("multi%0Aline message" in ln for ln in cmds)
    assert not any("suppressed" in ln for ln in cmds)
    assert any(ln.startswith("::notice ") and "file level note" in ln for ln in cmds)
    assert out[-1].startswith("apex2amp: 3 file(s) scanned")


def test_github_format_from_cli(tmp_path):
    repo = copy_fixture("cuda_amp_only", tmp_path)
    r = cli(["check", "--format", "github", "."], cwd=repo)
    assert r.returncode == 1
    cmds = [ln for ln in r.stdout.splitlines() if ln.startswith("::")]
    assert cmds and all(GH_RX.match(ln) for ln in cmds)
    assert any(",line=" in ln and "title=A2A" in ln for ln in cmds)
