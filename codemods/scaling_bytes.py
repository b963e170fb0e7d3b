"""The manual-scaling codemod's second screening stage, from bytes and the stdlib AST, without libcst.

`may_scale_by_hand(data, module_name)` answers a superset of the files `codemods.manual_scaling` can
act on: apex's fp16_utils names, a `(loss * S).backward()` (directly or through the assignment before
it), a class with both `backward` and `step` methods, or a `.half()` model with `.float()` copies of its
parameters. Nothing here imports libcst, so the scout
(`migrate/scout.py`) runs it too.
"""
from __future__ import annotations

import ast
import functools
import keyword
import re
from typing import Optional, Set

from .apex_bytes import may_import_apex
from .ast_walk import ast_nodes, parse_ast
from .hazard_bytes import _WORD

_CLOSER = {40: 41, 91: 93, 123: 125}  # ( [ {  ->  ) ] }
_MAX_BRACKETS = 4


def _statement_tail(data: bytes, start: int) -> Optional[bytes]:
    """The rest of the statement's line from `start`: plain characters, one-line strings without
    backslashes, comments, and brackets (up to four deep, matched) that may span lines; None when
    something else comes first (a backslash, an open string, an unmatched bracket). Scanned by hand:
    the equivalent regex takes longer to compile than a worker takes to import the codemods."""
    i, n, closers = start, len(data), []
    while i < n:
        c = data[i]
        if c == 10:  # a line break ends the statement, outside brackets
            if not closers:
                return data[start:i]
        elif c == 34 or c == 39:  # a string: to its closing quote on this line
            j = i + 1
            while j < n and data[j] != c:
                if data[j] == 92 or data[j] == 10:
                    return None
                j += 1
            if j == n:
                return None
            i = j
        elif c == 35:  # a comment: to the line break
            j = data.find(b"\n", i)
            i = (n if j < 0 else j) - 1
        elif c == 92:
            return None
        elif c in _CLOSER:
            if len(closers) == _MAX_BRACKETS:
                return None
            closers.append(_CLOSER[c])
        elif c == 41 or c == 93 or c == 125:
            if not closers or closers.pop() != c:
                return None
        i += 1
    return None if closers else data[start:]


_BACKWARD_ATTR = re.compile(rb"\.[\s\\]*backward\b")
# `def backward` / `def step`, the word boundary before `def` checked by `_defines`: a pattern opening
# with `\b` is tried at every offset (ten times slower on a long training script)
_DEF_BACKWARD = re.compile(rb"def[\s\\]+backward\b")
_DEF_STEP = re.compile(rb"def[\s\\]+step\b")
_SINGLE_STAR = re.compile(rb"(?<!\*)\*(?!\*)")
_SPACE = frozenset(b" \t\r\n\\\f")


def _defines(data: bytes, pattern: "re.Pattern[bytes]") -> bool:
    """Whether `pattern` (`def ...`) matches where `def` starts a word."""
    return any(m.start() == 0 or data[m.start() - 1] not in _WORD for m in pattern.finditer(data))


def _no_scaled_backward(data: bytes) -> bool:
    """True when the bytes alone show that no `.backward()` is called on a product or on a name
    assigned a product, and no class defines both backward and step; False when unsure."""
    if _defines(data, _DEF_BACKWARD) and _defines(data, _DEF_STEP):
        return False
    receivers = set()
    for m in _BACKWARD_ATTR.finditer(data):
        j = m.start() - 1
        while j >= 0 and data[j] in _SPACE:
            j -= 1
        if j < 0:
            continue
        if data[j] == 41:  # `)`: a call (`scaler.scale(loss).backward()`), or maybe a bracketed product
            if _called(data, j):
                continue
            return False
        if data[j] not in _WORD:
            continue  # a subscript, a literal: not a name
        k = j
        while k > 0 and data[k - 1] in _WORD:
            k -= 1
        p = k - 1
        while p >= 0 and data[p] in _SPACE:
            p -= 1
        if (p >= 0 and data[p] == 46) or data[k] in b"0123456789":
            continue  # an attribute or a number
        receivers.add(data[k:j + 1])
    for name in receivers:
        # `name = ...`, and `(name) = ...`, which binds it too; not `name == ...`
        for m in re.finditer(rb"(?<![\w.])" + re.escape(name) + rb"\b[\s\\)]*=(?!=)", data):
            tail = _statement_tail(data, m.end())
            if tail is None or _SINGLE_STAR.search(tail):
                return False
    return True


_CLOSE_TO_OPEN = {close: open_ for open_, close in _CLOSER.items()}
_QUOTES_AND_COMMENTS = frozenset(b"'\"#")
_CALL_SCAN = 2000  # bytes scanned back for the `(` of a call before giving up (unsure)


def _called(data: bytes, close: int) -> bool:
    """Whether the `)` at `close` ends a call's arguments (`f(...)`, `x.scale(...)`, `g()(...)`),
    not a bracketed expression; False when unsure (a string or comment inside, a long scan)."""
    stack = [40]
    i = close - 1
    stop = max(-1, close - _CALL_SCAN)
    while i > stop:
        c = data[i]
        if c in _QUOTES_AND_COMMENTS:
            return False
        if c in _CLOSE_TO_OPEN:
            stack.append(_CLOSE_TO_OPEN[c])
        elif c in _CLOSER:  # an opening bracket
            if stack.pop() != c:
                return False
            if not stack:
                break
        i -= 1
    else:
        return False
    p = i - 1
    while p >= 0:  # back over blanks and backslash continuations; a bare line break may end a statement
        c = data[p]
        if c == 32 or c == 9 or c == 12:
            p -= 1
        elif c == 10 and p > 0 and (data[p - 1] == 92 or (data[p - 1] == 13 and p > 1 and data[p - 2] == 92)):
            p -= 2 if data[p - 1] == 92 else 3
        else:
            break
    if p < 0 or data[p] == 10 or data[p] == 13:
        return False
    if data[p] == 41 or data[p] == 93:
        return True  # `f(a)(b)`, `fs[0](b)`
    if data[p] not in _WORD:
        return False
    k = p
    while k > 0 and data[k - 1] in _WORD:
        k -= 1
    word = data[k:p + 1].decode("latin-1")
    # `return (a * b)`, `match (a * b)...:` and `1or(a * b)` (a number glued to a keyword) call nothing
    return not (keyword.iskeyword(word) or keyword.issoftkeyword(word) or word[0].isdigit())


@functools.lru_cache(maxsize=64)  # the screen, pass 1 and pass 2 ask about the same bytes
def may_scale_by_hand(data: bytes, module_name: str = "") -> bool:
    """A superset of the files `_Migration` can act on, decided without libcst."""
    if b"FP16_Optimizer" in data or b"fp16_utils" in data or b"network_to_half" in data \
            or may_import_apex(data, module_name):
        return True
    if b".half()" in data and (b".float()" in data or b"FloatTensor" in data) and b"parameters()" in data \
            and b"backward" in data:
        return True  # fp32 master copies of a .half() model (codemods.manual_fp16), maybe without a scaled loss
    if b"backward" not in data or _no_scaled_backward(data):
        return False
    try:
        tree = parse_ast(data)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return True
    products: Set[str] = set()
    receivers: Set[str] = set()
    for node in ast_nodes(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "backward":
            recv = node.func.value
            if isinstance(recv, ast.BinOp) and isinstance(recv.op, ast.Mult):
                return True
            if isinstance(recv, ast.Name):
                receivers.add(recv.id)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.BinOp) and isinstance(node.value.op, ast.Mult):
            products.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ClassDef):
            methods = {b.name for b in node.body if isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef))}
            if {"backward", "step"} <= methods:
                return True
    return bool(products & receivers)
