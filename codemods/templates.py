"""Code snippets the codemods build their replacements from, parsed once and handed out as copies.

A codemod makes its new code by parsing small texts (`scaler.update()`, `optimizer`,
`torch.autocast("cuda", dtype=torch.float16)`), the same few over and over: about four per file,
6-75 us each with libcst's parser. The first parse of a text is kept; every use gets a fresh copy of
that tree, made field by field without the parser or the nodes' validation (the kept tree was
validated when parsed), in about 40% of a parse. A copy and not the kept tree itself: the index
(`codemods.index`) knows nodes by identity, so one tree must never hold the same node object twice
(two `scaler.update()` after two optimizers' steps).
"""
from __future__ import annotations

import functools
from typing import List

import libcst as cst

from .walk import NODE, SEQUENCE, TRIVIA, field_names, value_kind

_new = object.__new__
_set = object.__setattr__  # the nodes are frozen dataclasses
_NODES = (NODE, TRIVIA)  # every node is copied, whitespace too


def fresh_copy(node: cst.CSTNode) -> cst.CSTNode:
    """A copy of `node`'s whole tree: equal fields, every node (whitespace too) a new object."""
    cls = type(node)
    new = _new(cls)
    for name in field_names(cls):
        value = getattr(node, name)
        kind = value_kind(type(value))
        if kind in _NODES:
            value = fresh_copy(value)
        elif kind == SEQUENCE:
            value = type(value)(fresh_copy(v) if value_kind(type(v)) in _NODES else v for v in value)
        _set(new, name, value)
    return new


@functools.lru_cache(maxsize=512)
def _expression(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


@functools.lru_cache(maxsize=512)
def _statement(code: str) -> cst.BaseStatement:
    return cst.parse_statement(code)


@functools.lru_cache(maxsize=128)
def _statements(code: str) -> tuple:
    return tuple(cst.parse_module(code).body)


def expression(code: str) -> cst.BaseExpression:
    """`cst.parse_expression(code)`, a fresh tree each call (raises as it does)."""
    return fresh_copy(_expression(code))  # type: ignore[return-value]


def statement(code: str) -> cst.BaseStatement:
    """`cst.parse_statement(code)`, a fresh tree each call (raises as it does)."""
    return fresh_copy(_statement(code))  # type: ignore[return-value]


def statements(code: str) -> List[cst.BaseStatement]:
    """The statements of `cst.parse_module(code)`, fresh trees each call (raises as it does)."""
    return [fresh_copy(s) for s in _statements(code)]  # type: ignore[misc]
