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


def _field_names(cls: type) -> Tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(getattr(cls, "__dataclass_fields__", {}))
    return names


def children(node: cst.CSTNode) -> List[cst.CSTNode]:
    """The syntax children of `node` (no whitespace, comments or punctuation), in field order."""
    out: List[cst.CSTNode] = []
    for name in _field_names(type(node)):
        value = getattr(node, name)
        if isinstance(value, cst.CSTNode):
            if type(value) not in _TRIVIA:
                out.append(value)
        elif isinstance(value, (list, tuple)):
            out.extend(v for v in value if isinstance(v, cst.CSTNode) and type(v) not in _TRIVIA)
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
