"""Code snippets the codemods build their replacements from, parsed from text at each use.

A codemod makes its new code by parsing small texts (`scaler.update()`, `optimizer`,
`torch.autocast("cuda", dtype=torch.float16)`). Each use parses anew, so every replacement is a
tree of its own: one module never holds the same node object twice (two `scaler.update()` after
two optimizers' steps), which the shared index (`codemods.index`) relies on, as it knows nodes by
identity.
"""
from __future__ import annotations

from typing import List

import libcst as cst


def expression(code: str) -> cst.BaseExpression:
    """`cst.parse_expression(code)` (raises as it does)."""
    return cst.parse_expression(code)


def statement(code: str) -> cst.BaseStatement:
    """`cst.parse_statement(code)` (raises as it does)."""
    return cst.parse_statement(code)


def statements(code: str) -> List[cst.BaseStatement]:
    """The statements of `cst.parse_module(code)` (raises as it does)."""
    return list(cst.parse_module(code).body)
