"""The safety gate: a rewrite that does not parse, or that a second rewrite would change, is refused.

A faulty codemod is stood in for by a real `Codemod` subclass put in the registry's list in place of
the real ones (the list `codemods/registry.py` exports, that every run reads), and the file goes
through the public `rewrite_source` with the prefilter off, so that the codemod sees every file."""
from __future__ import annotations

import libcst as cst
import pytest

from codemods import registry
from codemods.base import Codemod
from migrate import engine


class _Stage(Codemod):
    NAME = "test"
    CODES = ("A2A601",)

    def __init__(self, transform, reports_only=False):
        self.rewrite, self.REPORTS_ONLY, self.calls = transform, reports_only, 0

    def transform(self, wrapper, ctx):
        self.calls += 1
        return self.rewrite(wrapper.module, ctx)


@pytest.fixture
def only(monkeypatch):
    def install(*stages):
        monkeypatch.setattr(registry, "CODEMODS", list(stages))
        return stages
    return install


def _rewrite(text):
    return engine.rewrite_source(text, path="a.py", prefilter_enabled=False)


def test_output_that_python_cannot_parse_is_refused(only):
    only(_Stage(lambda m, ctx: m.with_changes(body=[cst.SimpleStatementLine([cst.Expr(cst.Name("def"))])])))
    r = _rewrite("x = 1\n")
    assert r.error and "did not parse" in r.error and "syntax error" in r.error
    assert r.new_text == "x = 1\n" and not r.changed


def test_output_a_second_rewrite_would_change_is_refused(only):
    only(_Stage(lambda m, ctx: m.with_changes(body=[*m.body, cst.parse_statement("y = 2\n")])))
    r = _rewrite("x = 1\n")
    assert r.error and "second rewrite" in r.error and not r.changed


def test_idempotent_output_passes(only):
    def once(m, ctx):
        if "y = 2" in m.code:
            return m
        return m.with_changes(body=[*m.body, cst.parse_statement("y = 2\n")])
    only(_Stage(once))
    r = _rewrite("x = 1\n")
    assert r.error is None and r.new_text == "x = 1\ny = 2\n"


def test_findings_only_codemods_are_not_rerun_by_the_gate(only):
    """The gate reruns the codemods that may change the text; one that only reports runs once."""
    def report(m, ctx):
        ctx.report(m.body[0], "A2A601", "a finding")
        return m

    def once(m, ctx):
        return m if "y = 2" in m.code else m.with_changes(body=[*m.body, cst.parse_statement("y = 2\n")])
    rewrite, lint = only(_Stage(once), _Stage(report, reports_only=True))
    r = _rewrite("x = 1\n")
    assert r.changed and [f.code for f in r.findings] == ["A2A601"]
    assert (rewrite.calls, lint.calls) == (2, 1)  # the rewrite ran both; the gate reran only the rewrite
