"""The safety gate: a rewrite that does not parse, or that a second rewrite would change, is refused."""
from __future__ import annotations

import libcst as cst
import pytest

from migrate import engine, source_rewrite


class _Codemod:
    NAME = "test"

    def __init__(self, transform):
        self._transform = transform

    def transform(self, wrapper, ctx):
        return self._transform(wrapper.module)


@pytest.fixture
def only(monkeypatch):
    def install(transform):
        monkeypatch.setattr(source_rewrite, "_run_codemods_for", lambda *a, **k: [_Codemod(transform)])
    return install


def test_output_that_python_cannot_parse_is_refused(only):
    only(lambda m: m.with_changes(body=[cst.SimpleStatementLine([cst.Expr(cst.Name("def"))])]))
    r = engine.rewrite_source("x = 1\n", path="a.py")
    assert r.error and "did not parse" in r.error and "syntax error" in r.error
    assert r.new_text == "x = 1\n" and not r.changed


def test_output_a_second_rewrite_would_change_is_refused(only):
    only(lambda m: m.with_changes(body=[*m.body, cst.parse_statement("y = 2\n")]))
    r = engine.rewrite_source("x = 1\n", path="a.py")
    assert r.error and "second rewrite" in r.error and not r.changed


def test_idempotent_output_passes(only):
    def once(m):
        if "y = 2" in m.code:
            return m
        return m.with_changes(body=[*m.body, cst.parse_statement("y = 2\n")])
    only(once)
    r = engine.rewrite_source("x = 1\n", path="a.py")
    assert r.error is None and r.new_text == "x = 1\ny = 2\n"


def test_findings_only_codemods_are_not_rerun_by_the_gate(monkeypatch):
    from codemods.registry import CODEMODS
    hazards = next(cm for cm in CODEMODS if cm.NAME == "hazards")
    assert hazards.REPORTS_ONLY
    calls = []
    real = hazards.transform
    monkeypatch.setattr(hazards, "transform", lambda w, ctx: calls.append(1) or real(w, ctx))
    text = ("import torch\nfrom apex import amp\n\ndef train(model, optimizer, x):\n"
            "    model, optimizer = amp.initialize(model, optimizer, opt_level='O1')\n"
            "    loss = model(x).half().sum()\n"
            "    with amp.scale_loss(loss, optimizer) as scaled_loss:\n        scaled_loss.backward()\n"
            "    optimizer.step()\n")
    r = engine.rewrite_source(text, path="h.py", module_name="h")
    assert r.changed and any(f.code.startswith("A2A6") for f in r.findings)
    assert len(calls) == 1  # the rewrite ran it; the gate did not
