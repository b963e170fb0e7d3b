"""Stdlib-only helpers of the second screening stages: stdlib `ast` walks and byte-regex builders.

Nothing here imports libcst, so the screens that use these (`codemods/screens.py`) run in the scout
(`migrate/scout.py`) while the main process is still importing libcst. `codemods.walk` holds the
libcst walks.
"""
from __future__ import annotations

import ast
import bisect
import functools
from typing import Iterator, List, Optional, Sequence, Tuple


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


def power_value(a: Optional[float], b: Optional[float]) -> Optional[float]:
    """`a ** b` of two literal numbers: inf when it overflows, None when undefined (0 ** -1, a complex
    root) or when the exponent is out of reach (|b| >= 400)."""
    if a is None or b is None or abs(b) >= 400:
        return None
    try:
        v = a ** b
    except OverflowError:
        return float("inf")
    except ZeroDivisionError:
        return None
    return v if isinstance(v, float) else None
