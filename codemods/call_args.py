"""Arguments of an apex call bound by apex's signature and rebuilt for torch's: positionals whose
torch position differs become keywords, dropped parameters go, new keywords are appended in the
call's own layout."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Set, Tuple

import libcst as cst

from . import templates


def bind_args(call: cst.Call, signature: Sequence[str]) -> Optional[Dict[str, cst.Arg]]:
    """Map parameter name -> Arg by the (apex) signature; None on *args/**kwargs or unknown keywords."""
    out: Dict[str, cst.Arg] = {}
    pos = 0
    for a in call.args:
        if a.star:
            return None
        if a.keyword is not None:
            if a.keyword.value not in signature or a.keyword.value in out:
                return None
            out[a.keyword.value] = a
        else:
            if pos >= len(signature):
                return None
            out[signature[pos]] = a
            pos += 1
    return out


def literal_bool(node: Optional[cst.BaseExpression]) -> Optional[bool]:
    if isinstance(node, cst.Name) and node.value in ("True", "False"):
        return node.value == "True"
    if isinstance(node, cst.Integer) and node.value in ("0", "1"):
        return node.value == "1"
    return None


def rebuild_args(call: cst.Call, apex_sig: Sequence[str], torch_sig: Sequence[str], drop: Set[str],
                 extra: Sequence[Tuple[str, str]]) -> List[cst.Arg]:
    """Keep arguments in their order; positionals whose torch position differs become keywords.

    `drop` names parameters to remove, `extra` (name, code) pairs are appended as keywords unless present.
    """
    args: List[cst.Arg] = []
    pos = 0
    positional_ok = True
    present: Set[str] = set()
    for a in call.args:
        if a.keyword is None:
            name = apex_sig[pos]
            pos += 1
            if name in drop:
                positional_ok = False
                continue
            present.add(name)
            if positional_ok and pos - 1 < len(torch_sig) and torch_sig[pos - 1] == name:
                args.append(a)
            else:
                positional_ok = False
                args.append(a.with_changes(keyword=cst.Name(name), equal=cst.AssignEqual(
                    whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))))
        else:
            name = a.keyword.value
            if name in drop:
                continue
            present.add(name)
            args.append(a)
    new = [(n, c) for n, c in extra if n not in present]
    return append_keywords(call, args, new)


def append_keywords(call: cst.Call, args: List[cst.Arg], new: Sequence[Tuple[str, str]]) -> List[cst.Arg]:
    """Append `name=code` arguments, keeping a multi-line call's layout and trailing comma."""
    if not new:
        if args and call.args and args[-1] is not call.args[-1]:
            args[-1] = args[-1].with_changes(comma=call.args[-1].comma)
        return args
    trailing = call.args[-1].comma if call.args else cst.MaybeSentinel.DEFAULT
    sep: object = cst.MaybeSentinel.DEFAULT
    if len(call.args) >= 2 and isinstance(call.args[-2].comma, cst.Comma):
        sep = call.args[-2].comma
    elif isinstance(trailing, cst.Comma) and isinstance(trailing.whitespace_after, cst.ParenthesizedWhitespace):
        sep = trailing
    made = [cst.Arg(value=templates.expression(code), keyword=cst.Name(name),
                    equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                          whitespace_after=cst.SimpleWhitespace("")))
            for name, code in new]
    if args:
        args[-1] = args[-1].with_changes(comma=sep)
    for m in made[:-1]:
        args.append(m.with_changes(comma=sep))
    args.append(made[-1].with_changes(comma=trailing if isinstance(trailing, cst.Comma) else cst.MaybeSentinel.DEFAULT))
    return args
