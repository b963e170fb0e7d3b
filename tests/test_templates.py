"""`codemods.templates` gives what libcst's parser gives for a snippet, a new tree at each use."""
from __future__ import annotations

import libcst as cst
import pytest

from codemods import templates


@pytest.mark.parametrize("code", ["optimizer", "scaler.step(optimizer)", 'torch.autocast("cuda", dtype=torch.float16)',
                                  "(p for g in opt.param_groups for p in g['params'])", "[a, *b]", "x if y else z"])
def test_an_expression_is_the_parse(code):
    assert templates.expression(code).deep_equals(cst.parse_expression(code))


def test_a_statement_is_the_parse():
    code = "with torch.autocast('cuda', enabled=use_amp):\n    loss = model(x)\n"
    got = templates.statement(code)
    assert got.deep_equals(cst.parse_statement(code))
    assert cst.Module([]).code_for_node(got) == code


def test_statements_and_bad_code():
    body = templates.statements("import torch\n\nx = 1\n")
    assert [cst.Module([]).code_for_node(s) for s in body] == ["import torch\n", "\nx = 1\n"]
    with pytest.raises(cst.ParserSyntaxError):
        templates.expression("a +")
