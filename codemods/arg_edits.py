"""Argument lists of calls, edited in the call's own comma style (shared by the apex.parallel and
launch codemods), and the literal True / False switches apex.parallel's options take."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Set

import libcst as cst

from .names import literal_number

SPACE_COMMA = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))


def kwarg(name: str, value: cst.BaseExpression) -> cst.Arg:
    """A `name=value` argument in the compact style (no spaces around `=`)."""
    return cst.Arg(value=value, keyword=cst.Name(name),
                   equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                         whitespace_after=cst.SimpleWhitespace("")))


def edit_args(call: cst.Call, *, drop: Sequence[cst.Arg] = (), replace: Optional[Dict[int, cst.Arg]] = None,
              insert_after: int = -1, new: Sequence[cst.Arg] = ()) -> cst.Call:
    """Drop some arguments (by identity), replace some (by original index) and insert `new` after index
    `insert_after` of the original list, keeping the commas' whitespace style of the call."""
    replace = replace or {}
    drop_ids = {id(a) for a in drop}
    orig = list(call.args)
    sep: cst.Comma = next((a.comma for a in orig if isinstance(a.comma, cst.Comma)
                           and a is not orig[-1]), SPACE_COMMA)
    out: List[cst.Arg] = []
    keep: Set[int] = set()  # arguments (kept or replaced) whose own comma, line break and all, stays
    trailing = orig[-1].comma if orig else cst.MaybeSentinel.DEFAULT
    for i, a in enumerate(orig):
        if id(a) not in drop_ids:
            r = replace.get(i, a)
            if i < len(orig) - 1 and isinstance(a.comma, cst.Comma):
                r = r if r is a else r.with_changes(comma=a.comma)
                keep.add(id(r))
            out.append(r)
        if i == insert_after:
            out.extend(new)
    if insert_after >= len(orig) or (insert_after < 0 and new and not orig):
        out.extend(new)
    # what stood between the last argument and `)` (a newline in a call laid out over lines) stays there
    closing = orig[-1].whitespace_after_arg if orig else cst.SimpleWhitespace("")
    fixed: List[cst.Arg] = []
    for i, a in enumerate(out):
        was_last = bool(orig) and a is orig[-1]
        if i == len(out) - 1:
            fixed.append(a.with_changes(comma=trailing, whitespace_after_arg=closing))
        elif id(a) in keep:
            fixed.append(a)
        else:
            a = a.with_changes(whitespace_after_arg=cst.SimpleWhitespace("")) if was_last else a
            fixed.append(a.with_changes(comma=sep))
    return call.with_changes(args=fixed)


def is_false(e: cst.BaseExpression) -> bool:
    return (isinstance(e, cst.Name) and e.value == "False") or literal_number(e) == 0


def is_true(e: cst.BaseExpression) -> bool:
    return (isinstance(e, cst.Name) and e.value == "True") or literal_number(e) == 1
