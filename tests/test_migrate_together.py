"""The trees of fixtures/migrate_together/: refusals that span files (issue 21) stay byte-identical
under a real `apex2amp rewrite .`, and `check` reports exactly the refusal findings each case lists."""
import json
import os
import shutil
import subprocess
import sys

import pytest

CASES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "migrate_together")
LAYOUTS = sorted(n for n in os.listdir(CASES) if os.path.isdir(os.path.join(CASES, n)))
REFUSALS = ("A2A116", "A2A117", "A2A126")


def _cli(root, *args):
    env = dict(os.environ, APEX2AMP_CACHE_DIR=str(root) + ".cache")
    return subprocess.run([sys.executable, "-m", "migrate", *args], cwd=str(root), capture_output=True,
                          text=True, env=env)


def _tree(root):
    out = {}
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in names:
            with open(os.path.join(folder, name), "rb") as fh:
                out[os.path.relpath(os.path.join(folder, name), root)] = fh.read()
    return out


def _expected(case):
    with open(os.path.join(CASES, case, "findings.txt"), encoding="utf-8") as fh:
        return sorted(ln.strip() for ln in fh if ln.strip() and not ln.startswith("#"))


@pytest.mark.parametrize("case", LAYOUTS)
def test_tree_stays_byte_identical_with_its_refusal_findings(case, tmp_path):
    root = tmp_path / case
    shutil.copytree(os.path.join(CASES, case), root, ignore=shutil.ignore_patterns("findings.txt"))
    before = _tree(root)
    check = _cli(root, "check", "--format", "json", ".")
    assert check.returncode == 1, check.stdout + check.stderr
    report = json.loads(check.stdout)
    assert not any(fr["changed"] for fr in report["files"]), check.stdout
    found = sorted(f"{fr['path']}:{f['line']} {f['code']}" for fr in report["files"] for f in fr["findings"]
                   if f["code"] in REFUSALS)
    assert found == _expected(case)
    res = _cli(root, "rewrite", ".")
    assert res.returncode == 1, res.stdout + res.stderr
    assert _tree(root) == before, res.stdout
