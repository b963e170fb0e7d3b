"""The hazard lint's second screening stage, from bytes and the stdlib AST, without libcst.

`may_have_hazard(data)` answers a superset of what `codemods.hazards` reports: mixed-precision code
with a big constant in a mask function, a subscript assignment or a product; BCE; a half cast; a
non-finite check or clipping next to a scaler. The byte stages below read each rule's shape before any
parse. Nothing here imports libcst, so the scout (`migrate/scout.py`) runs it too.
"""
from __future__ import annotations

import ast
import functools
import itertools
import re
from typing import Iterator, List, Optional

from .ast_walk import ast_nodes, ast_nodes_near, nested, parse_ast, power_value

FP16_MAX = 65504.0
MIXED_PRECISION = re.compile(r"autocast|GradScaler|\bapex\b|\.half\(\)|float16|scale_loss")
AUTOCAST_OR_SCALER = re.compile(r"autocast|GradScaler|\bapex\b|scale_loss")
FP16_CASTS = re.compile(r"\.half\(\)|\.to\([^)]*(float16|torch\.half)")
MASK_FUNCS = {"masked_fill", "masked_fill_", "fill_", "full", "full_like", "new_full", "where"}
CLIP_FUNCS = {"clip_grad_norm_", "clip_grad_value_", "clip_grad_norm"}


_MIXED_PRECISION_B = re.compile(MIXED_PRECISION.pattern.encode())
_FP16_CASTS_B = re.compile(FP16_CASTS.pattern.encode())
_AUTOCAST_OR_SCALER_B = re.compile(AUTOCAST_OR_SCALER.pattern.encode())
# a number literal that may lie below FP16_INV_TINY (1.5e-5): an exponent <= -5, 0.0000..., or a power
_SMALL_LITERAL_B = re.compile(rb"(?i)\d[eE]-0*(?:[5-9]|[1-9]\d)|\.0000")  # or a power: _power_of_literals
_INF_WORDS = ("inf", "+inf", "-inf", "infinity", "-infinity")


def _ast_number(node: ast.AST) -> Optional[float]:
    """The stdlib-AST twin of `literal_number` for a power's operands (a signed int or float constant)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _ast_number(node.operand)
        return -v if v is not None else None
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    return None


def _ast_big(node: ast.AST, threshold: float = FP16_MAX) -> bool:
    """The stdlib-AST twin of `_big`: a spelled constant beyond `threshold` (or an infinity)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _ast_big(node.operand, threshold)
    if isinstance(node, ast.Constant):
        v = node.value
        return isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) >= threshold
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        v = power_value(_ast_number(node.left), _ast_number(node.right))  # as `literal_number` does
        return v is not None and abs(v) >= threshold
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "float" and node.args:
        a = node.args[0]
        if isinstance(a, ast.Constant) and str(a.value).strip().lower() in _INF_WORDS:
            return True
        return _ast_big(a, threshold)
    if isinstance(node, ast.Attribute) and node.attr in ("min", "max") and isinstance(node.value, ast.Call):
        f = node.value.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        return name == "finfo"
    if isinstance(node, (ast.Name, ast.Attribute)):
        return (node.id if isinstance(node, ast.Name) else node.attr) in ("inf", "infty")
    return False


# Between a power's operands: spaces, line breaks, backslash continuations, comments, brackets, signs.
_POWER_GAP = rb"(?:[\s()\\+-]|#[^\n]*\n)*"  # a comment runs to its line end: one way to match
# Bytes every branch of the AST walk below needs (a superset, so most files skip the parse):
# a big or infinite constant (5+ integer digits, an exponent >= 4, hex/octal/binary, inf, finfo,
# a power of two number literals: `_ast_number` reads only those, so `x ** 2` and `**kwargs` never count),
# BCE, a non-finite check or clipping beside `.scale(`, or a half dtype in a cast.
_BIG_OR_INF_B = re.compile(rb"(?i)\binf(?:ty)?\b|['\"]\s*[+-]?inf(?:inity)?\s*['\"]|finfo|\b0[xob]"
                           rb"|[\d.]" + _POWER_GAP + rb"\*\*" + _POWER_GAP + rb"[\d.]"
                           rb"|(?<![\w.])\d[\d_]{4}|[\d.]e\+?0*(?:[4-9]|[1-9]\d)")

# `_big_or_inf` answers `_BIG_OR_INF_B.search` without scanning every byte with a seven-way regex
# (~15 MB/s): each branch is found from a literal it must contain, by bytes.find speed.
_INF_WORD_AT = re.compile(rb"\binf(?:ty)?\b")  # on lower-cased bytes, as (?i) reads them
_INF_QUOTED_AT = re.compile(rb"['\"]\s*[+-]?inf(?:inity)?\s*['\"]")
_EXPONENT_AT = re.compile(rb"[\d.]e\+?0*(?:[4-9]|[1-9]\d)")
_POWER_AFTER = re.compile(_POWER_GAP + rb"[\d.]")
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789_", b"0000000000")
_WORD = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_GAP_BYTES = frozenset(b" \t\n\r\f\v()\\+-")


def _find_all(data: bytes, literal: bytes) -> Iterator[int]:
    i = data.find(literal)
    while i >= 0:
        yield i
        i = data.find(literal, i + 1)


def _big_or_inf(data: bytes) -> bool:
    """`_BIG_OR_INF_B.search(data) is not None`, except that a power after a comment line is always
    taken (a superset): each branch is looked for only where its literal occurs."""
    lowered = data.lower()
    for i in _find_all(lowered, b"inf"):
        if _INF_WORD_AT.match(lowered, i) or lowered[i - 1:i + 4] == b"finfo":
            return True
        j = i - 1
        if j >= 0 and lowered[j] in b"+-":
            j -= 1
        while j >= 0 and lowered[j] in b" \t\n\r\f\v":
            j -= 1
        if j >= 0 and _INF_QUOTED_AT.match(lowered, j):
            return True
    for base in (b"0x", b"0o", b"0b"):
        for i in _find_all(lowered, base):
            if i == 0 or lowered[i - 1] not in _WORD:
                return True
    if _power_of_literals(data):
        return True
    zeros = lowered.translate(_DIGITS_AS_ZERO)
    i = zeros.find(b"00000")
    while i >= 0:  # five digits (or underscores) in a row: a match starts a run, on a digit
        start = i
        while start > 0 and zeros[start - 1] == 48:
            start -= 1
        if data[start] != 95 and (start == 0 or (data[start - 1] not in _WORD and data[start - 1] != 46)):
            return True
        end = i + 5
        while end < len(zeros) and zeros[end] == 48:
            end += 1
        i = zeros.find(b"00000", end)
    for i in itertools.chain(_find_all(zeros, b"0e"), _find_all(lowered, b".e")):
        if _EXPONENT_AT.match(lowered, i):
            return True
    return False


_SPACE_OR_OPEN = frozenset(b" \t\r\n\f\\(")
_SPACE_OR_CLOSE = frozenset(b" \t\r\n\f\\)")
_TOKEN = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.")


def _tiny_in_sum(data: bytes) -> bool:
    """A tiny number literal (`_SMALL_LITERAL_B`) written as an operand of `+`, the only place A2A602's
    eps check reads one (`x + 1e-8`, `(1e-8 + x)`); a comment between them is taken as a yes."""
    for m in _SMALL_LITERAL_B.finditer(data):
        start, end = m.start(), m.end()
        while start > 0 and data[start - 1] in _TOKEN:
            start -= 1
        while end < len(data) and data[end] in _TOKEN:
            end += 1
        j = start - 1
        while j >= 0 and data[j] in _SPACE_OR_OPEN:
            j -= 1
        k = end
        while k < len(data) and data[k] in _SPACE_OR_CLOSE:
            k += 1
        if (j >= 0 and data[j] in b"+#") or (k < len(data) and data[k] in b"+#"):
            return True
        if j >= 0 and _comment_before(data, j):
            return True  # the token may follow a comment line inside brackets
    return False


def _comment_before(data: bytes, j: int) -> bool:
    """Whether the line holding byte j has a `#` before it: j may then lie inside a comment, and a
    backward scan cannot tell where the code before it ends."""
    return b"#" in data[data.rfind(b"\n", 0, j) + 1:j]


def _power_of_literals(data: bytes) -> bool:
    """A `**` between two number literals (brackets, signs, spaces and comments around it), which
    `literal_number` evaluates; `x ** 2` and `**kwargs` are not."""
    for i in _find_all(data, b"**"):
        if _POWER_AFTER.match(data, i + 2) and _number_before_power(data, i):
            return True
    return False


def _number_before_power(data: bytes, i: int) -> bool:
    """Whether the bytes before the `**` at `i`, back over brackets, signs and spaces, end in a digit
    or `.`; a line with a comment on the way is taken as a yes (the regex may skip that comment)."""
    j = i - 1
    crossed_line = False
    while j >= 0:
        c = data[j]
        if c in _GAP_BYTES:
            crossed_line = crossed_line or c == 10
            j -= 1
            continue
        if 48 <= c <= 57 or c == 46:
            return True
        return crossed_line and _comment_before(data, j)
    return False


# A subscript assignment of a big finite number (the only rule without autocast; an infinity or finfo is
# fine there): `] =`, then brackets, signs, comments, chained targets or `float(`, then a number literal
# of 5+ digits, an exponent >= 4, hex/octal/binary, or the base of a power.
_SUBSCRIPT_BIG_B = re.compile(rb"\][\s\\]*=(?!=)(?:[\s(\\+-]|#[^\n]*\n|[\w.]+[\s\\]*=(?!=)|float\b)*"
                              rb"(?:\d[\d_]{4}|[\d.][\d_.]*[eE]\+?0*(?:[4-9]|[1-9]\d)|0[xXoObB]"
                              rb"|[\d.][\d_.]*[\s)\\]*\*\*)")
# Where a rule can fire, every statement holds one of these: a big constant, BCE, a cast, a check
# (a plain superset of _BIG_OR_INF_B's tokens, without look-behinds: this one runs over whole files).
_WHERE_B = re.compile(rb"\d[\d_]{4}|[\d.][eE]\+?0*(?:[4-9]|[1-9]\d)|\*\*|[iI][nN][fF]|finfo|0[xXoObB]"
                      rb"|BCELoss|binary_cross_entropy|\bhalf\b|\bto\b|\btype\b|isnan|isinf|isfinite|clip_grad")


def _lines_of(data: bytes, pattern: "re.Pattern[bytes]") -> Optional[List[int]]:
    """The sorted 1-based lines holding a match of `pattern`, as the stdlib parser numbers them
    (None when the file has bare carriage returns, which it also counts as line ends)."""
    if data.count(b"\r") != data.count(b"\r\n"):
        return None
    starts = [m.start() for m in pattern.finditer(data)]
    if not starts:
        return []
    out: List[int] = []
    line, pos = 1, 0
    for start in starts:
        line += data.count(b"\n", pos, start)
        pos = start
        if not out or out[-1] != line:
            out.append(line)
    return out


def _autocast_or_scaler(data: bytes) -> bool:
    """`_AUTOCAST_OR_SCALER_B.search(data)`, by bytes.find for each word (the regex has no literal prefix)."""
    if b"autocast" in data or b"GradScaler" in data or b"scale_loss" in data:
        return True
    return b"apex" in data and _APEX_WORD_B.search(data) is not None


_APEX_WORD_B = re.compile(rb"\bapex\b")


def _hazard_tokens(data: bytes, autocast: bool) -> bool:
    """Bytes some rule needs; without autocast only a subscript assignment and the scaler rules remain."""
    scaled = b".scale(" in data and any(w in data for w in (b"isnan", b"isinf", b"isfinite", b"clip_grad"))
    if not autocast:
        return scaled or _SUBSCRIPT_BIG_B.search(data) is not None
    if scaled or b"BCELoss" in data or b"binary_cross_entropy" in data:
        return True
    if _big_or_inf(data) and _big_in_rule_shape(data):
        return True
    return (b"float16" in data or b"half" in data.lower()) and _cast_tokens(data)


# A number literal that may be 1e4 or more: 5+ digits, an exponent >= 4, hex/octal/binary.
_BIG_TOKEN_B = re.compile(rb"\d[\d_]{4}|[\d.][\d_.]*[eE]\+?0*(?:[4-9]|[1-9]\d)|0[xXoObB]")
_MASK_CALL_B = re.compile(rb"\b(?:masked_fill_?|fill_|full(?:_like)?|new_full|where)[\s\\]*(?=\()")
_BACK_GAP = frozenset(b" \t\r\n\f\\()+-")


def _big_in_rule_shape(data: bytes) -> bool:
    """Where an autocast file's big-number rules can fire (A2A601): a big literal assigned into a
    subscript, passed to a mask function, or multiplied (a literal or a power of literals next to `*`)."""
    if _SUBSCRIPT_BIG_B.search(data):
        return True
    for m in _MASK_CALL_B.finditer(data):
        call = _CAST_CALL_B.match(data, m.end())
        if call is None or _BIG_TOKEN_B.search(call.group()) or _power_of_literals(call.group()):
            return True
    for i in _find_all(data, b"*"):
        if data[i + 1:i + 2] == b"*" or (i > 0 and data[i - 1] == 42):
            continue  # a power or **kwargs: its operands are read next to the `*` of a product
        if _big_operand_after(data, i + 1) or _big_operand_before(data, i):
            return True
    return False


def _big_operand_after(data: bytes, k: int) -> bool:
    """The operand right of a `*` at k - 1: a big literal, or the base of a power."""
    m = _POWER_AFTER.match(data, k)  # brackets, signs, spaces, comments, then a digit or `.`
    if m is None:
        return False
    start = m.end() - 1
    end = start
    while end < len(data) and (data[end] in _TOKEN or (data[end] in b"+-" and data[end - 1] in b"eE")):
        end += 1
    if _BIG_TOKEN_B.search(data, start, end):
        return True
    j = end
    while j < len(data) and data[j] in _SPACE_OR_CLOSE:
        j += 1
    return data[j:j + 2] == b"**" or data[j:j + 1] == b"#"


def _big_operand_before(data: bytes, i: int) -> bool:
    """The operand left of the `*` at i: a big literal, or the exponent of a power."""
    j = i - 1
    crossed_line = False
    while j >= 0 and data[j] in _BACK_GAP:
        crossed_line = crossed_line or data[j] == 10
        j -= 1
    if j < 0 or data[j] not in _TOKEN:
        return False
    if crossed_line and _comment_before(data, j):
        return True  # the operand may lie before a comment
    end = j + 1
    while j >= 0 and (data[j] in _TOKEN or (data[j] in b"+-" and j > 0 and data[j - 1] in b"eE")):
        j -= 1
    if not (48 <= data[j + 1] <= 57 or data[j + 1] == 46):
        return False  # a name, not a number
    if _BIG_TOKEN_B.search(data, j + 1, end):
        return True
    while j >= 0 and data[j] in _BACK_GAP:
        j -= 1
    return j >= 1 and data[j - 1:j + 1] == b"**"


# A call's arguments, up to three brackets deep: string literals and comments are single atoms, so
# a bracket inside them does not count. A call this does not match (deeper, an escape or a line
# break inside a string) is taken as a cast.
_ARG_ATOM = rb"""(?:[^()'"#]|"[^"\\\n]*"|'[^'\\\n]*'|#[^\n]*(?![^\n]))"""
_CAST_CALL_B = re.compile(rb"\(" + nested(_ARG_ATOM, ((rb"\(", rb"\)"),)) + rb"\)")
_CAST_OPEN_B = re.compile(rb"\.[\s\\]*(?:to|type)[\s\\]*(?=\()")
_HALF_CALL_B = re.compile(rb"\.[\s\\]*half[\s\\]*\(")


def _cast_tokens(data: bytes) -> bool:
    """A `.half(` call, or a `.to(` / `.type(` call whose arguments spell half or float16 (A2A604 reads
    the argument's dotted name or string)."""
    if _HALF_CALL_B.search(data):
        return True
    for m in _CAST_OPEN_B.finditer(data):
        call = _CAST_CALL_B.match(data, m.end())
        if call is None:
            return True
        args = call.group().lower()
        if b"half" in args or b"float16" in args:
            return True
    return False


@functools.lru_cache(maxsize=64)  # the screen, pass 1 and pass 2 ask about the same bytes
def may_have_hazard(data: bytes) -> bool:
    """A superset of what `_Lint` reports, decided on the stdlib AST: mixed-precision code with a
    big constant in a mask function, a subscript assignment or a product; BCE; a half cast; a
    non-finite check or clipping next to a scaler. Syntax errors go on to libcst, which reports them."""
    autocast = _autocast_or_scaler(data)  # the lint's autocast_file
    if not autocast and b".half()" not in data and b"float16" not in data:
        return False  # not MIXED_PRECISION
    if _FP16_CASTS_B.search(data) and (autocast or _tiny_in_sum(data) or _power_of_literals(data)):
        return True  # .half() / .to(float16): A2A604 in an autocast file; A2A602 with a tiny eps
    if not _hazard_tokens(data, autocast):
        return False
    try:
        tree = parse_ast(data)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return True
    scaled = b".scale(" in data
    lines = _lines_of(data, _WHERE_B)
    for node in ast_nodes(tree) if lines is None else ast_nodes_near(tree, lines):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            if autocast and (_ast_big(node.left, 1e4) or _ast_big(node.right, 1e4)):
                return True
        elif isinstance(node, ast.Assign):
            if any(isinstance(t, ast.Subscript) for t in node.targets) and _ast_big(node.value):
                return True
        elif isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if autocast and name in MASK_FUNCS and any(
                    _ast_big(a) for a in list(node.args) + [k.value for k in node.keywords]):
                return True
            if autocast and (name.endswith("BCELoss") or name == "binary_cross_entropy"):
                return True
            if scaled and (name in ("isnan", "isinf", "isfinite") or name in CLIP_FUNCS):
                return True
            if autocast and isinstance(f, ast.Attribute) and (f.attr == "half" or f.attr in ("to", "type") and any(
                    "float16" in ast.dump(a) or "half" in ast.dump(a).lower()
                    for a in list(node.args) + [k.value for k in node.keywords])):
                return True
        elif autocast and isinstance(node, (ast.Name, ast.Attribute)):
            name = node.id if isinstance(node, ast.Name) else node.attr
            if name.endswith("BCELoss") or name == "binary_cross_entropy":
                return True
    return False
