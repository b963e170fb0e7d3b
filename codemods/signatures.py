"""Adding a parameter to a function and the matching keyword to its calls, keeping the layout.

Used to pass the GradScaler to the functions that now need it (`def train(..., scaler)` and
`train(..., scaler=scaler)`), whatever the signature's shape: trailing commas, one parameter per
line, defaults, `*args`, keyword-only parameters, `**kwargs`.
"""
from __future__ import annotations

from typing import List, Set

import libcst as cst


def param_names(f: cst.FunctionDef) -> Set[str]:
    """Names of every parameter of `f`."""
    return {p.name.value for p in all_params(f)}


def all_params(f: cst.FunctionDef) -> List[cst.Param]:
    """Every parameter of `f`, positional-only to `**kwargs`."""
    ps = f.params
    out = list(ps.posonly_params) + list(ps.params) + list(ps.kwonly_params)
    if isinstance(ps.star_arg, cst.Param):
        out.append(ps.star_arg)
    if ps.star_kwarg is not None:
        out.append(ps.star_kwarg)
    return out


def append_item(items: List, new):
    """Append a Param/Arg keeping the list's comma layout (trailing commas, one item per line)."""
    if not items:
        return [new]
    last = items[-1]
    if isinstance(last.comma, cst.Comma):
        between = items[-2].comma if len(items) > 1 and isinstance(items[-2].comma, cst.Comma) else \
            cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        return items[:-1] + [last.with_changes(comma=between), new.with_changes(comma=last.comma)]
    # no trailing comma: the whitespace before `)` (a line break when `)` has a line of its own) moves
    # to the new last item, and one item per line stays so when the items before say it
    trail = "whitespace_after_param" if isinstance(last, cst.Param) else "whitespace_after_arg"
    between = items[-2].comma if len(items) > 1 and isinstance(items[-2].comma, cst.Comma) and isinstance(
        items[-2].comma.whitespace_after, cst.ParenthesizedWhitespace) else \
        cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    return items[:-1] + [last.with_changes(comma=between, **{trail: cst.SimpleWhitespace("")}),
                         new.with_changes(**{trail: getattr(last, trail)})]


def add_param(name: str):
    """A transform adding parameter `name` to a FunctionDef (`=None` where a default is required)."""
    def apply(node: cst.CSTNode) -> cst.CSTNode:
        f = node
        assert isinstance(f, cst.FunctionDef)
        ps = f.params
        if any(p.name.value == name for p in all_params(f)):
            return f
        eq = cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))
        if ps.star_arg is not cst.MaybeSentinel.DEFAULT or ps.kwonly_params:
            new = cst.Param(cst.Name(name), default=cst.Name("None"), equal=eq)
            if ps.kwonly_params:
                return f.with_changes(params=ps.with_changes(kwonly_params=append_item(list(ps.kwonly_params), new)))
            star = ps.star_arg
            if isinstance(star, cst.Param) and not isinstance(star.comma, cst.Comma):
                star = star.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            return f.with_changes(params=ps.with_changes(star_arg=star, kwonly_params=[new]))
        params = list(ps.params)
        if ps.star_kwarg is not None and params and not isinstance(params[-1].comma, cst.Comma):
            params[-1] = params[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        needs_default = any(p.default is not None for p in params)
        new = cst.Param(cst.Name(name), default=cst.Name("None") if needs_default else None,
                        equal=eq if needs_default else cst.MaybeSentinel.DEFAULT)
        if ps.star_kwarg is not None:
            new = new.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
            return f.with_changes(params=ps.with_changes(params=params + [new]))
        return f.with_changes(params=ps.with_changes(params=append_item(params, new)))

    return apply


def add_keyword(name: str, value: str):
    """A transform adding `name=value` to a Call (unless it already passes `name`)."""
    def apply(node: cst.CSTNode) -> cst.CSTNode:
        call = node
        assert isinstance(call, cst.Call)
        if any(a.keyword is not None and a.keyword.value == name for a in call.args):
            return call
        kw = cst.Arg(cst.Name(value), keyword=cst.Name(name),
                     equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
        return call.with_changes(args=append_item(list(call.args), kw))

    return apply
