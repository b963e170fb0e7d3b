"""Every rule's before/after example (`apex2amp explain`, docs/rules.md) is true: running the tool on
`before` gives exactly `after` and reports the rule; for a report-only rule it reports the rule and leaves
`before` as it is (or, for a report that comes with other rules' rewrite, gives exactly `after`).

Examples run through the public API (`migrate.rewrite_source`); the few rules that need a run option
(`--unsafe-fixes`, `--target fsdp2`) run through the CLI on a temporary file.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import codemods.registry  # noqa: F401  (importing the codemods registers their rules)
from codemods.base import RULES
from migrate import rewrite_source

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# rules whose example needs a run option (CLI flags)
FLAGS = {code: ["--unsafe-fixes"] for code, r in RULES.items() if r.unsafe}
FLAGS.update({code: ["--target", "fsdp2"] for code in RULES if code.startswith("A2A8")})

# rules about files that are not Python: the example is that file's text (run through the CLI)
FILE_NAMES = {"A2A410": "launch.sh", "A2A223": "launch.sh", "A2A414": "config.yaml", "A2A411": "README.md"}

# examples not yet rewritten as complete programs that reproduce (a fragment without its apex import, or
# output that differs from the tool's); each fixed example leaves this list (strict xfail)
NOT_YET_TRUE = """
    A2A111 A2A122 A2A123 A2A126 A2A128 A2A130 A2A131 A2A132 A2A135 A2A136 A2A137 A2A140 A2A141
    A2A142 A2A146 A2A147 A2A160 A2A161 A2A173 A2A174 A2A175 A2A181 A2A313 A2A322 A2A324 A2A416 A2A417
    A2A418 A2A420 A2A502 A2A505 A2A506 A2A507 A2A508 A2A509 A2A602 A2A701 A2A703 A2A803
    A2A804 A2A805 A2A806 A2A807 A2A808 A2A809
""".split()
PENDING = {code: "example not yet rewritten to reproduce" for code in NOT_YET_TRUE}


def _run_cli(text: str, flags, tmp_path, name="example.py"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run([sys.executable, "-m", "apex2amp", "rewrite", "--no-cache", "--format", "json",
                          *flags, name], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert res.returncode in (0, 1), res.stderr
    codes = {f["code"] for entry in json.loads(res.stdout)["files"] for f in entry["findings"]}
    return path.read_text(encoding="utf-8"), codes


def _run(text: str, code: str, tmp_path):
    if code in FLAGS or code in FILE_NAMES:
        return _run_cli(text, FLAGS.get(code, []), tmp_path, FILE_NAMES.get(code, "example.py"))
    res = rewrite_source(text, path="example.py")
    assert res.error is None, res.error
    return res.new_text, {f.code for f in res.findings}


def _cases():
    for code in sorted(RULES):
        marks = [pytest.mark.xfail(reason=PENDING[code], strict=True)] if code in PENDING else []
        yield pytest.param(code, id=code, marks=marks)


def test_every_rule_has_an_example():
    assert [c for c, r in RULES.items() if not r.before] == []


@pytest.mark.parametrize("code", list(_cases()))
def test_example_reproduces(code, tmp_path):
    r = RULES[code]
    before = r.before + "\n"
    new_text, codes = _run(before, code, tmp_path)
    assert code in codes, f"{code} not reported; reported: {sorted(codes)}"
    if r.fixes:
        assert new_text == r.after + "\n"
    else:  # a report: the text stays, or it is the rewrite the report comes with (its `after`)
        assert new_text in (before, r.after + "\n")
