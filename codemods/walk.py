"""Light read-only walks of a libcst subtree.

A libcst visitor rebuilds every node it passes (`_visit_and_replace_children`), which makes even a
read-only walk cost about as much as parsing the subtree. Questions such as "which names does this
statement read" only need the nodes: `iter_nodes` reads them from the dataclass fields. The order
is field order (pre-order, parents first), which is source order for everything but a few nodes
(`a if c else b`, decorators): use it where the order does not matter. Whitespace, comments and
punctuation nodes are not visited.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import libcst as cst


_TRIVIA = frozenset({
    cst.SimpleWhitespace, cst.ParenthesizedWhitespace, cst.TrailingWhitespace, cst.EmptyLine, cst.Newline,
    cst.Comment, cst.LeftParen, cst.RightParen, cst.Comma, cst.Dot, cst.Colon, cst.AssignEqual, cst.Semicolon,
    cst.LeftSquareBracket, cst.RightSquareBracket, cst.LeftCurlyBrace, cst.RightCurlyBrace,
})
_FIELDS: Dict[type, Tuple[str, ...]] = {}


def field_names(cls: type) -> Tuple[str, ...]:
    """The dataclass field names of a libcst node class, in declaration order (cached)."""
    names = _FIELDS.get(cls)
    if names is None:  # dataclasses.fields: libcst's slotted classes also list `__slots__` as a pseudo-field
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) else ()
    return names


# type -> what a field value of that type is: a syntax node, a trivia node (whitespace, comments,
# punctuation), a sequence (a list or tuple, subclasses too) or anything else; one dict lookup per
# value instead of isinstance checks against libcst's abstract base class
OTHER, NODE, TRIVIA, SEQUENCE = 0, 1, 2, 3
_KIND: Dict[type, int] = {}


def value_kind(t: type) -> int:
    """`NODE` for a syntax node class (a CSTNode that is not trivia), `TRIVIA` for a trivia node class,
    `SEQUENCE` for a list or tuple class, `OTHER` otherwise (strings, None, sentinels)."""
    known = _KIND.get(t)
    if known is None:
        known = _KIND[t] = (TRIVIA if t in _TRIVIA else NODE) if issubclass(t, cst.CSTNode) else \
            SEQUENCE if issubclass(t, (list, tuple)) else OTHER
    return known


def children(node: cst.CSTNode) -> List[cst.CSTNode]:
    """The syntax children of `node` (no whitespace, comments or punctuation), in field order."""
    out: List[cst.CSTNode] = []
    kinds = _KIND
    for name in field_names(type(node)):
        value = getattr(node, name)
        kind = kinds.get(type(value))
        if kind is None:
            kind = value_kind(type(value))
        if kind == NODE:
            out.append(value)
        elif kind == SEQUENCE:
            out.extend(v for v in value if (kinds.get(type(v)) or value_kind(type(v))) == NODE)
    return out


def iter_nodes(node: cst.CSTNode, descend: Optional[Callable[[cst.CSTNode], bool]] = None
               ) -> Iterator[cst.CSTNode]:
    """`node` and every syntax node below it, parents first; `descend(n)` False keeps out of n's subtree."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        if descend is None or descend(n):
            stack.extend(reversed(children(n)))


class _NoFieldHooks:
    """libcst's per-field hooks (`visit_<Node>_<field>`), which it looks up by name for every field
    of every node visited, turned off: our visitors define none."""

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        return None

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        return None


class Visitor(_NoFieldHooks, cst.CSTVisitor):
    """A libcst visitor without the per-field hooks."""


class Transformer(_NoFieldHooks, cst.CSTTransformer):
    """A libcst transformer without the per-field hooks."""
