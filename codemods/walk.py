"""Light read-only walks of a libcst subtree (the stdlib-ast ones live in `codemods.ast_walk`).

A libcst visitor rebuilds every node it passes (`_visit_and_replace_children`), which makes even a
read-only walk cost about as much as parsing the subtree. Questions such as "which names does this
statement read" only need the nodes: `iter_nodes` reads them from the dataclass fields. The order
is field order (pre-order, parents first), which is source order for everything but a few nodes
(`a if c else b`, decorators): use it where the order does not matter. Whitespace, comments and
punctuation nodes are not visited.
"""
from __future__ import annotations

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
    if names is None:
        names = _FIELDS[cls] = tuple(getattr(cls, "__dataclass_fields__", {}))
    return names


# type -> whether a field value of that type is a syntax node (a CSTNode, not trivia): one dict
# lookup per value instead of an isinstance check against libcst's abstract base class
_SYNTAX: Dict[type, bool] = {}


def _is_syntax(t: type) -> bool:
    known = _SYNTAX.get(t)
    if known is None:
        known = _SYNTAX[t] = issubclass(t, cst.CSTNode) and t not in _TRIVIA
    return known


def children(node: cst.CSTNode) -> List[cst.CSTNode]:
    """The syntax children of `node` (no whitespace, comments or punctuation), in field order."""
    out: List[cst.CSTNode] = []
    syntax = _SYNTAX
    for name in field_names(type(node)):
        value = getattr(node, name)
        t = type(value)
        if syntax.get(t) or (t not in syntax and _is_syntax(t)):
            out.append(value)
        elif t is list or t is tuple or (t not in syntax and isinstance(value, (list, tuple))):
            out.extend(v for v in value if syntax.get(type(v)) or (type(v) not in syntax and _is_syntax(type(v))))
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


class Visitor(cst.CSTVisitor):
    """A libcst visitor without the per-field hooks (`visit_<Node>_<field>`), which libcst looks up
    by name for every field of every node visited; subclasses define none."""

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        return None

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        return None


class Transformer(cst.CSTTransformer):
    """A libcst transformer without the per-field hooks (see `Visitor`)."""

    def on_visit_attribute(self, node: cst.CSTNode, attribute: str) -> None:
        return None

    def on_leave_attribute(self, original_node: cst.CSTNode, attribute: str) -> None:
        return None
