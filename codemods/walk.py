"""Light read-only walks of a libcst subtree (and of a stdlib ast tree, for the second stages).

A libcst visitor rebuilds every node it passes (`_visit_and_replace_children`), which makes even a
read-only walk cost about as much as parsing the subtree. Questions such as "which names does this
statement read" only need the nodes: `iter_nodes` reads them from the dataclass fields. The order
is field order (pre-order, parents first), which is source order for everything but a few nodes
(`a if c else b`, decorators): use it where the order does not matter. Whitespace, comments and
punctuation nodes are not visited.
"""
from __future__ import annotations

import ast
import bisect
import functools
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

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


def nested(atom: bytes, brackets: Sequence[Tuple[bytes, bytes]], depth: int = 3) -> bytes:
    """Regex source for a run of `atom`s and of bracketed groups of such runs, nested up to `depth`
    levels (`brackets`: escaped opening and closing pairs), for the byte stages that read a call's
    arguments or a statement's tail without parsing."""
    inner = atom + rb"*"
    for _ in range(depth):
        inner = rb"(?:" + atom + b"".join(rb"|" + o + inner + c for o, c in brackets) + rb")*"
    return inner


@functools.lru_cache(maxsize=4)
def parse_ast(data: bytes) -> ast.Module:
    """`ast.parse(data)`, shared by the second stages that screen the same bytes (raises as it does)."""
    return ast.parse(data)


def ast_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a stdlib-ast `tree`, in no particular order, without the Load/Store contexts
    (`ast.walk`, about twice as fast): for the ast second stages that ask "is there any ...?"."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for name in node._fields:
            if name == "ctx":
                continue
            value = getattr(node, name, None)
            if type(value) is list:
                stack.extend([v for v in value if isinstance(v, ast.AST)])
            elif isinstance(value, ast.AST):
                stack.append(value)


def ast_nodes_near(tree: ast.Module, lines: Sequence[int]) -> Iterator[ast.AST]:
    """The nodes of the statements of `tree` whose line span holds one of `lines` (sorted), in no
    particular order: a statement elsewhere is skipped whole, and a compound statement's own parts
    (test, decorators, handlers) are walked while its body statements are pruned the same way."""
    def touches(node: ast.AST) -> bool:
        i = bisect.bisect_left(lines, node.lineno)  # type: ignore[attr-defined]
        return i < len(lines) and lines[i] <= (node.end_lineno or node.lineno)  # type: ignore[attr-defined]

    stack: List[ast.AST] = [s for s in tree.body if touches(s)]
    while stack:
        stmt = stack.pop()
        yield stmt
        for name in stmt._fields:
            value = getattr(stmt, name, None)
            for v in (value if type(value) is list else (value,)):
                if isinstance(v, ast.stmt):
                    if touches(v):
                        stack.append(v)
                elif isinstance(v, ast.AST) and not isinstance(v, ast.expr_context):
                    yield from ast_nodes(v)
