"""The CLI contract through real `apex2amp` subprocesses: rewrite, check, --diff, exit codes, output."""
from __future__ import annotations

import os
import re
import subprocess

import pytest

from test_cli_helpers import ANSI_RX, cli, copy_fixture, finding_lines, tree_digest


def test_rewrite_writes_lists_files_then_sorted_findings_then_summary(tmp_path):
    repo = copy_fixture("legacy_repo", tmp_path)
    before = tree_digest(repo)
    r = cli(["rewrite", "."], cwd=repo)
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    changed = [ln for ln in lines if ln.startswith("rewrote ")]
    assert changed, r.stdout
    after = tree_digest(repo)
    assert {ln.split(" ", 1)[1] for ln in changed} == {p for p in before if before[p] != after.get(p)}
    found = finding_lines(r.stdout)
    assert found, "an apex amp trainer must produce findings"
    keys = [(f["path"], int(f["line"]), int(f["col"])) for f in found]
    assert keys == sorted(keys)
    assert all(int(f["line"]) >= 1 and int(f["col"]) >= 1 for f in found)
    # order: changed files, findings, summary last
    first_finding = next(i for i, ln in enumerate(lines) if finding_lines(ln))
    assert max(i for i, ln in enumerate(lines) if ln.startswith("rewrote ")) < first_finding
    assert "file(s) scanned" in lines[-1] and "changed" in lines[-1]
    assert not ANSI_RX.search(r.stdout), "piped output must be plain"
    # findings point at the rewritten lines: every reported line exists in the file
    for f in found:
        with open(os.path.join(repo, f["path"]), encoding="utf-8") as fh:
            assert int(f["line"]) <= len(fh.read().splitlines())
    # a second rewrite changes nothing
    again = cli(["rewrite", "."], cwd=repo)
    assert not [ln for ln in again.stdout.splitlines() if ln.startswith("rewrote ")]
    assert tree_digest(repo) == after


def test_clean_run_exits_zero_and_second_run_of_fixable_file_is_clean(tmp_path):
    work = copy_fixture("precommit", tmp_path)
    first = cli(["rewrite", "train_amp.py"], cwd=work)
    assert first.returncode == 1
    assert "rewrote train_amp.py" in first.stdout
    second = cli(["rewrite", "train_amp.py"], cwd=work)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "0 changed, 0 error(s); 0 fixed, 0 need review" in second.stdout
    (tmp_path / "clean.py").write_text("def add(a, b):\n    return a + b\n")
    only_clean = cli(["check", "clean.py"], cwd=tmp_path)
    assert only_clean.returncode == 0 and only_clean.stderr == ""


def test_check_writes_nothing_and_lists_pending_changes_and_findings(tmp_path):
    repo = copy_fixture("legacy_repo", tmp_path)
    before = tree_digest(repo)
    r = cli(["check", "."], cwd=repo)
    assert r.returncode == 1
    assert tree_digest(repo) == before
    assert any(ln.startswith("would rewrite ") for ln in r.stdout.splitlines())
    assert finding_lines(r.stdout)
    assert "to change" in r.stdout.splitlines()[-1]


def test_diff_prints_an_applicable_patch_and_writes_nothing(tmp_path):
    repo = copy_fixture("legacy_repo", tmp_path)
    before = tree_digest(repo)
    r = cli(["rewrite", "--diff", "."], cwd=repo)
    assert r.returncode == 1
    assert tree_digest(repo) == before
    assert r.stdout.startswith("--- a/"), r.stdout[:200]
    assert not finding_lines(r.stdout), "stdout must stay a clean patch"
    assert finding_lines(r.stderr) and "file(s) scanned" in r.stderr
    patch = subprocess.run(["patch", "-p1", "--forward", "--batch"], cwd=repo, input=r.stdout, text=True,
                           capture_output=True)
    assert patch.returncode == 0, patch.stdout + patch.stderr
    assert cli(["rewrite", "--diff", "."], cwd=repo).stdout == ""  # the patch was the whole rewrite


def test_colour_only_on_request_or_terminal(tmp_path):
    repo = copy_fixture("cuda_amp_only", tmp_path)
    plain = cli(["rewrite", "--diff", "."], cwd=repo)
    assert not ANSI_RX.search(plain.stdout + plain.stderr)
    coloured = cli(["rewrite", "--diff", "--color", "."], cwd=repo)
    assert ANSI_RX.search(coloured.stdout)
    assert ANSI_RX.sub("", coloured.stdout) == plain.stdout


def test_quiet_and_verbose(tmp_path):
    repo = copy_fixture("cuda_amp_only", tmp_path)
    (tmp_path / "cuda_amp_only" / "clean.py").write_text("x = 1\n")
    q = cli(["check", "-q", "."], cwd=repo)
    assert q.returncode == 1 and q.stdout == ""
    v = cli(["check", "-v", "."], cwd=repo)
    assert "unchanged clean.py" in v.stdout


def test_errors_exit_two_but_other_files_are_processed(tmp_path):
    repo = copy_fixture("cuda_amp_only", tmp_path)
    copy_fixture("broken", tmp_path)
    r = cli(["rewrite", repo, os.path.join(tmp_path, "broken")], cwd=tmp_path)
    assert r.returncode == 2
    assert re.search(r"bad_syntax\.py:\d+:\d+: error: syntax error", r.stderr), r.stderr
    assert any(ln.startswith("rewrote ") for ln in r.stdout.splitlines())
    missing = cli(["check", "does/not/exist.py"], cwd=tmp_path)
    assert missing.returncode == 2 and "no such file" in missing.stderr


@pytest.mark.parametrize("args", [["check", "--min-torch", "banana", "."], ["check", "--min-torch", "1.4", "."],
                                  ["check", "--format", "xml", "."], ["explain"], ["explain", "A2A999"],
                                  ["check", "--report", "r.md", "--verify-json", "missing.json", "."]])
def test_usage_errors_exit_two(tmp_path, args):
    r = cli(args, cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr


def test_progress_bar_only_on_a_terminal_for_long_runs(tmp_path):
    pty = pytest.importorskip("pty")
    for i in range(60):
        (tmp_path / f"m{i:02d}.py").write_text("x = 1\n")
    (tmp_path / "legacy.py").write_text("from torch.cuda.amp import GradScaler\ns = GradScaler()\n")
    master, slave = pty.openpty()
    try:
        import sys
        env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        proc = subprocess.run([sys.executable, "-m", "migrate", "check", "."], cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=slave, stdin=subprocess.DEVNULL, env=env, text=True, timeout=120)
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
    err = b"".join(chunks).decode("utf-8", "replace")
    assert proc.returncode == 1
    assert "apex2amp" in err and "61/61" in err, err[-500:]
    assert "61/61" not in proc.stdout and "would rewrite legacy.py" in proc.stdout
    piped = cli(["check", "."], cwd=tmp_path)
    assert "61/61" not in piped.stderr + piped.stdout


def test_python_api_rewrite_source_and_paths(tmp_path):
    import migrate
    src = "from torch.cuda.amp import GradScaler\nscaler = GradScaler()\n"
    res = migrate.rewrite_source(src)
    assert res.error is None and res.changed
    assert "torch.amp" in res.new_text
    assert {f.code for f in res.findings} and all(f.line >= 1 for f in res.findings)
    assert migrate.rewrite_source(res.new_text).new_text == res.new_text
    bad = migrate.rewrite_source("from apex import amp\ndef f(:\n")
    assert bad.error and not bad.changed
    repo = copy_fixture("cuda_amp_only", tmp_path)
    before = tree_digest(repo)
    run = migrate.rewrite_paths([repo], write=False)
    assert run.changed and tree_digest(repo) == before and run.exit_code() == 1
    run2 = migrate.rewrite_paths([repo], write=True)
    assert tree_digest(repo) != before and all(fr.written for fr in run2.changed)


def test_readme_python_api_example_runs(tmp_path):
    """The runnable example in docs/ecosystem.md works as printed."""
    import re
    import sys
    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "ecosystem.md"), encoding="utf-8") as fh:
        doc = fh.read()
    section = doc.split("### Python API", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    copy_fixture("cuda_amp_only", tmp_path)
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path / "cuda_amp_only", capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert 'GradScaler("cuda")' in r.stdout and "A2A151" in r.stdout
    assert "would rewrite" in r.stdout and "exit code 1" in r.stdout


def test_quick_exit_keeps_exit_codes_and_flushes_all_output(tmp_path):
    """The command exits without the interpreter's teardown (`console_main`): the exit code, every
    byte of a long piped report and the exit handlers must survive that."""
    fixtures = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures")
    # a hang guard, not a speed bound: the whole fixture tree costs ~100 s of CPU, more on a loaded machine
    r = cli(["check", "--format", "json", "--no-cache", fixtures], cwd=str(tmp_path), timeout=600)
    import json
    report = json.loads(r.stdout)
    assert r.returncode == report["summary"]["exit_code"] == 2, r.stderr  # fixtures/ecosystem/broken
    assert len(r.stdout) > 200_000 and report["summary"]["scanned"] > 250
    assert cli(["--version"], cwd=str(tmp_path)).returncode == 0
    assert cli(["check", str(tmp_path / "missing")], cwd=str(tmp_path)).returncode == 2
    # a helper's exit handler (atexit) still runs before the process ends, and what it writes is flushed
    code = ("import atexit, sys; sys.argv = ['apex2amp', '--version']; "
            "atexit.register(lambda: sys.stdout.write('handler ran')); "
            "from migrate.cli import console_main; console_main()")
    import sys
    done = subprocess.run([sys.executable, "-c", code], cwd=str(tmp_path), capture_output=True, text=True,
                          env=dict({k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"},
                                   PYTHONPATH=os.path.dirname(fixtures)), timeout=120)
    assert done.returncode == 0 and done.stdout.rstrip().endswith("handler ran"), done
