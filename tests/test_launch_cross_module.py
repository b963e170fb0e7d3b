"""Launch shapes across modules (fixtures/launch_cross_module/<case>/, see its README.md).

A spawn and the init_process_group it reaches in another file are one migration that apex2amp does
not write across files: every file stays byte-identical (check and rewrite agree, a second run too),
and the finding names the other file's init_process_group (pass 1 publishes the functions that join
the process group), instead of "may call" or a wrong "never calls init_process_group" (A2A407).
"""
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.join(REPO, "fixtures", "launch_cross_module")
CASES = sorted(d for d in os.listdir(ROOT) if os.path.isdir(os.path.join(ROOT, d)))


def _tree(root):
    return {os.path.relpath(os.path.join(d, f), root): open(os.path.join(d, f), "rb").read()
            for d, _, fs in os.walk(root) for f in fs if f.endswith(".py")}


def _cli(cwd, *args):
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "migrate", *args, "--no-cache"], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env=env)


@pytest.mark.parametrize("case", CASES)
def test_cross_module_launch_stays_and_names_the_init(case, tmp_path):
    work = tmp_path / case
    shutil.copytree(os.path.join(ROOT, case), work, ignore=shutil.ignore_patterns("findings.txt"))
    before = _tree(work)
    check = _cli(work, "check", ".")
    first = _cli(work, "rewrite", ".")
    again = _cli(work, "rewrite", ".")
    assert first.returncode == check.returncode == again.returncode == 1, first.stdout + first.stderr  # 1: to review
    assert _tree(work) == before, first.stdout
    findings = [ln for ln in first.stdout.splitlines() if ": A2A" in ln]
    assert findings == [ln for ln in check.stdout.splitlines() if ": A2A" in ln]
    with open(os.path.join(ROOT, case, "findings.txt"), encoding="utf-8") as fh:
        wanted = [ln.rstrip("\n") for ln in fh if ln.strip()]
    for want in wanted:
        if want.startswith("!"):
            assert not any(f": {want[1:]} " in f for f in findings), first.stdout
            continue
        path, sep, text = want.partition(": ")
        if sep and path.endswith(".py") and " " not in path:
            assert any(f.startswith(path + ":") and text in f for f in findings), (want, first.stdout)
        else:
            assert any(want in f for f in findings), (want, first.stdout)
