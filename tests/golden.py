"""Golden fixture pairs: `fixtures/<concern>/<case>.before.py` -> `<case>.after.py`.

Conventions (shared by every concern):
- `<case>.before.py` + `<case>.after.py`: the rewrite of before must equal after, byte for byte.
- `<case>.unchanged.py`: must come out unchanged (and produce no finding unless a `.codes` file says so).
- `<case>.codes` (optional): rule codes that must be among the findings, one per line; a line
  `!CODE` says that code must NOT be reported. Fix codes count too.
- `<case>.options.json` (optional): keyword arguments for `Options` (e.g. {"dtype": "bfloat16"})
  and "module_name".
Every rewrite is also checked to parse, to be stable under a second rewrite, and to leave lines
outside the edited hunks byte-identical.
"""
from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass
from typing import List, Optional

import libcst as cst

from codemods.base import Options
from migrate.engine import Result, Selection, rewrite_source

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures")


@dataclass
class Case:
    concern: str
    name: str
    before: str
    after: Optional[str]  # None: must stay unchanged

    @property
    def id(self) -> str:
        return f"{self.concern}/{self.name}"

    def _side(self, suffix: str) -> str:
        return os.path.join(ROOT, self.concern, self.name + suffix)

    def codes(self) -> List[str]:
        p = self._side(".codes")
        if not os.path.exists(p):
            return []
        with open(p, encoding="utf-8") as fh:
            return [ln.strip() for ln in fh if ln.strip() and not ln.startswith("#")]

    def options(self) -> dict:
        p = self._side(".options.json")
        if not os.path.exists(p):
            return {}
        with open(p, encoding="utf-8") as fh:
            return json.load(fh)


def _read(path: str) -> str:
    with open(path, "rb") as fh:
        return fh.read().decode("utf-8")


def collect(concerns: Optional[List[str]] = None) -> List[Case]:
    cases: List[Case] = []
    if not os.path.isdir(ROOT):
        return cases
    for concern in sorted(os.listdir(ROOT)):
        folder = os.path.join(ROOT, concern)
        if not os.path.isdir(folder) or (concerns and concern not in concerns):
            continue
        for fname in sorted(os.listdir(folder)):
            if fname.endswith(".before.py"):
                name = fname[: -len(".before.py")]
                after = os.path.join(folder, name + ".after.py")
                cases.append(Case(concern, name, _read(os.path.join(folder, fname)),
                                  _read(after) if os.path.exists(after) else None))
            elif fname.endswith(".unchanged.py"):
                name = fname[: -len(".unchanged.py")]
                cases.append(Case(concern, name, _read(os.path.join(folder, fname)), None))
    return cases


def run_case(case: Case) -> Result:
    opts = case.options()
    module_name = opts.pop("module_name", case.name)
    options = Options(**{k: (tuple(v) if k == "min_torch" else v) for k, v in opts.items()})
    return rewrite_source(case.before, path=f"{case.id}.py", module_name=module_name, options=options,
                          select=Selection())


def untouched_outside_hunks(before: str, after: str) -> bool:
    """Lines the diff calls equal are byte-identical (a check on the diff machinery and CRLF/BOM)."""
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal" and a[i1:i2] != b[j1:j2]:
            return False
    return True


def check_case(case: Case) -> None:
    res = run_case(case)
    assert res.error is None, f"{case.id}: {res.error}"
    expected = case.after if case.after is not None else case.before
    if res.new_text != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), res.new_text.splitlines(True),
                                            "expected", "actual"))
        raise AssertionError(f"{case.id}: output differs from the golden file\n{diff}")
    cst.parse_module(res.new_text)
    again = rewrite_source(res.new_text, path=f"{case.id}.py", module_name=case.name, options=Options(
        **{k: (tuple(v) if k == "min_torch" else v) for k, v in case.options().items() if k != "module_name"}))
    assert again.new_text == res.new_text, f"{case.id}: a second rewrite changes the output"
    assert untouched_outside_hunks(case.before, res.new_text)
    codes = {f.code for f in res.findings}
    for want in case.codes():
        if want.startswith("!"):
            assert want[1:] not in codes, f"{case.id}: unexpected finding {want[1:]}: {res.findings}"
        else:
            assert want in codes, f"{case.id}: expected finding {want}, got {sorted(codes)}"
    if case.after is None and not case.codes():
        open_findings = [f for f in res.findings if not f.ignored]
        assert not open_findings, f"{case.id}: must-stay-unchanged case has findings: {open_findings}"
