"""`codemods.templates` hands out copies of snippets parsed once: each copy must be what libcst's
parser gives for the text (same code, deep-equal) and share no node object with another copy."""
from __future__ import annotations

import glob
import os

import libcst as cst
import pytest

from codemods import templates
from codemods.walk import field_names

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _all_nodes(node):
    yield node
    for name in field_names(type(node)):
        value = getattr(node, name)
        for v in (value if isinstance(value, (list, tuple)) else (value,)):
            if isinstance(v, cst.CSTNode):
                yield from _all_nodes(v)


def _statement_texts():
    """Every top-level statement of the fixtures' migrated files: the shapes the codemods write."""
    for path in sorted(glob.glob(os.path.join(ROOT, "fixtures", "*", "*.after.py")))[:40]:
        module = cst.parse_module(open(path, encoding="utf-8").read())
        for stmt in module.body:
            yield os.path.relpath(path, ROOT), module.code_for_node(stmt.with_changes(leading_lines=()))


@pytest.mark.parametrize("name,code", list(_statement_texts()), ids=lambda v: v if "\n" not in v else "")
def test_a_statement_copy_is_the_parse(name, code):
    first, second = templates.statement(code), templates.statement(code)
    parsed = cst.parse_statement(code)
    assert first.deep_equals(parsed) and second.deep_equals(parsed)
    assert cst.Module([]).code_for_node(first) == cst.Module([]).code_for_node(parsed)
    shared = {id(n) for n in _all_nodes(first)} & {id(n) for n in _all_nodes(second)}
    assert not shared


@pytest.mark.parametrize("code", ["optimizer", "scaler.step(optimizer)", 'torch.autocast("cuda", dtype=torch.float16)',
                                  "(p for g in opt.param_groups for p in g['params'])", "[a, *b]", "x if y else z"])
def test_an_expression_copy_is_the_parse(code):
    first, second = templates.expression(code), templates.expression(code)
    assert first.deep_equals(cst.parse_expression(code)) and first is not second
    assert not {id(n) for n in _all_nodes(first)} & {id(n) for n in _all_nodes(second)}


def test_statements_and_bad_code():
    body = templates.statements("import torch\n\nx = 1\n")
    assert [cst.Module([]).code_for_node(s) for s in body] == ["import torch\n", "\nx = 1\n"]
    with pytest.raises(cst.ParserSyntaxError):
        templates.expression("a +")
    with pytest.raises(cst.ParserSyntaxError):
        templates.expression("a +")  # a failed parse is not kept
