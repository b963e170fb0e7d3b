"""Where the autocast region of a migrated backward must start: at the forward pass the loss comes from.

Two questions `_Analysis.plan_region` asks when the loss's statements hold no model call:
- is the forward somewhere the region cannot reach (another function of this module, an enclosing
  block, before a backward or step)? Then no correct region exists and the module is refused (A2A142);
- is the loss a parameter of a backward helper (`def backward(self, loss, optimizer)` of a mixin)?
  Then the region belongs at the helper's callers, around the forward and the loss they pass in.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Set, Tuple

import libcst as cst

from .names import assigned_names, names_read
from .signatures import all_params
from .walk import iter_nodes


def forward_elsewhere(a, body: Sequence[cst.CSTNode], stop: int, traced: List[cst.CSTNode], needed: Set[str],
                      func: Optional[cst.FunctionDef]) -> Optional[Tuple[cst.CSTNode, str]]:
    """(node, reason) when the loss traced to `traced` (statements of `body`) comes from a forward pass
    that an autocast region around them cannot include; None when no such forward is known.

    `stop` is the index in `body` where tracing stopped at a statement that must stay outside the
    region (-1 when it reached the top). Only models known from `amp.initialize` count."""
    if not a.models:
        return None
    for stmt in traced:
        helper = _helper_with_forward(a, stmt, func)
        if helper is not None:
            return stmt, (f"the forward pass runs in `{helper.name.value}`, called here, while the loss and its "
                          "backward are computed in this function: an autocast region here would leave the model "
                          "in fp32")
    if stop >= 0:
        # the slice goes on past the stopper (`if not isfinite(loss): return` between the loss and
        # `loss *= k`): the loss statements above it, and the forward they read, count too
        needed = set(needed)
        for s in reversed(list(body[:stop])):
            if not assigned_names(s) & needed:
                continue
            if a._calls_model(s, func):
                return s, ("the forward pass comes before a backward, an optimizer step or a statement leaving "
                           "the block (return/break/continue) that the autocast region may not include")
            needed |= names_read(s)
    cur: Optional[cst.CSTNode] = body[0] if body else None
    while cur is not None:
        owner = _owner(a, cur)
        if owner is None:
            return None
        block, idx = a.block_of(owner)
        if block is None:
            return None
        for s in reversed(list(block.body[:idx])):  # type: ignore[attr-defined]
            if assigned_names(s) & needed and a._calls_model(s, func):
                return s, ("the forward pass runs outside the loop or `if` block that computes the loss and its "
                           "backward: an autocast region cannot span both without wrapping the backward")
        cur = owner
    return None


def _owner(a, stmt: cst.CSTNode) -> Optional[cst.CSTNode]:
    """The compound statement whose block holds `stmt`, up to the enclosing function."""
    block, _ = a.block_of(stmt)
    if block is None:
        return None
    owner = a.owner_stmt(block)
    if isinstance(owner, (cst.Else, cst.ExceptHandler, cst.Finally)):
        owner = a.parent(owner)
    while isinstance(owner, cst.If) and isinstance(a.parent(owner), cst.If):
        owner = a.parent(owner)
    if owner is None or isinstance(owner, (cst.FunctionDef, cst.ClassDef, cst.Module)) or \
            not isinstance(owner, cst.BaseCompoundStatement):
        return None
    return owner


def _helper_with_forward(a, stmt: cst.CSTNode, func: Optional[cst.FunctionDef]) -> Optional[cst.FunctionDef]:
    """A function of this module called in `stmt` (`self.m(...)` from a method, `f(...)`) whose body
    calls an amp model."""
    funcs = a._functions()
    for n in iter_nodes(stmt):
        if type(n) is not cst.Call:
            continue
        f = n.func  # type: ignore[attr-defined]
        if isinstance(f, cst.Attribute) and isinstance(f.value, cst.Name) and f.value.value == "self":
            cands = [d for d in funcs.get(f.attr.value, []) if a.class_of(d) is not None]
        elif isinstance(f, cst.Name):
            cands = [d for d in funcs.get(f.value, []) if a.class_of(d) is None]
        else:
            continue
        for d in cands:
            if d is not func and a._calls_model(d.body, d):
                return d
    return None


def loss_at_callers(a, loss: cst.BaseExpression, func: Optional[cst.FunctionDef]
                    ) -> Optional[List[Tuple[cst.BaseStatement, cst.BaseExpression, Optional[cst.FunctionDef]]]]:
    """For a loss that is a parameter of `func` (a backward helper), the (call statement, argument,
    caller) of every call of `func` in this module; None when the loss is no parameter, nothing here
    calls `func`, or a call does not pass the loss plainly (by position or keyword)."""
    if func is None or not isinstance(loss, cst.Name):
        return None
    params = [p for p in all_params(func)]
    names = [p.name.value for p in params]
    if loss.value not in names:
        return None
    p = params[names.index(loss.value)]
    if p is func.params.star_arg or p is func.params.star_kwarg:
        return None
    positional = list(func.params.posonly_params) + list(func.params.params)
    is_method = a.class_of(func) is not None
    pos = next((i for i, q in enumerate(positional) if q is p), None)
    if pos is not None and is_method:
        pos -= 1  # `self` is bound by the call `self.m(...)`
    calls = a._call_sites(func, a._functions())
    if not calls:
        return None
    out = []
    for call in calls:
        if any(arg.star for arg in call.args):
            return None
        arg = next((x for x in call.args if x.keyword is not None and x.keyword.value == loss.value), None)
        if arg is None and pos is not None:
            plain = [x for x in call.args if x.keyword is None]
            arg = plain[pos] if 0 <= pos < len(plain) else None
        if arg is None:
            return None
        out.append((a.stmt_of(call), arg.value, a.func_of(call)))
    return out


def forward_through_helper(a, call: cst.Call, callables: Set[str]) -> bool:
    """Without an `amp.initialize` in this module: whether `call` runs the forward pass through a
    module-level function of this module (`loss, n = _fwd_pass(self.model, batch, ...)`): a model
    handed in (`self.<attr>` or a callable parameter of the caller) lands on a parameter the function
    calls, and the function holds no backward, step or nested definition. autocast is a dynamic
    scope, so a region around the call covers the forward and the loss computed inside."""
    f = call.func
    if not isinstance(f, cst.Name):
        return False
    cands = [d for d in a._functions().get(f.value, []) if a.class_of(d) is None and a.func_of(d) is None]
    if len(cands) != 1:
        return False
    helper = cands[0]
    positional = list(helper.params.posonly_params) + list(helper.params.params)
    by_name = {p.name.value for p in all_params(helper)}
    handed: Set[str] = set()
    for i, arg in enumerate(call.args):
        if arg.star:
            return False
        v = arg.value
        model_like = (isinstance(v, cst.Attribute) and isinstance(v.value, cst.Name) and v.value.value == "self") \
            or (isinstance(v, cst.Name) and v.value in callables)
        if not model_like:
            continue
        if arg.keyword is not None:
            if arg.keyword.value in by_name:
                handed.add(arg.keyword.value)
        elif i < len(positional):
            handed.add(positional[i].name.value)
    if not handed:
        return False
    called = False
    for n in iter_nodes(helper.body):
        if type(n) in (cst.FunctionDef, cst.ClassDef, cst.Yield, cst.Global, cst.Nonlocal):
            return False
        if type(n) is not cst.Call:
            continue
        if a._forbidden(n):
            return False  # backward or step inside: an autocast region may not include it
        g = n.func  # type: ignore[attr-defined]
        if isinstance(g, cst.Attribute) and g.attr.value == "forward":
            g = g.value
        if isinstance(g, cst.Name) and g.value in handed:
            called = True
    return called


def try_body_source(a, stmt: cst.CSTNode, wanted: Set[str]) -> Optional[Tuple[cst.IndentedBlock, int]]:
    """(the try's body, index) of the last statement of `try:`'s body that assigns a name the loss reads,
    when `stmt` is a `try` that must stay outside a region (its handlers return or raise, as around an
    OOM-tolerant forward) and only its body assigns those names: the region then goes inside the
    try's body, around the forward there. None otherwise."""
    if not isinstance(stmt, cst.Try) or not isinstance(stmt.body, cst.IndentedBlock) or not a._forbidden(stmt):
        return None
    others: List[cst.CSTNode] = list(stmt.handlers)
    if stmt.orelse is not None:
        others.append(stmt.orelse)
    if stmt.finalbody is not None:
        others.append(stmt.finalbody)
    if any(assigned_names(o) & wanted for o in others):
        return None  # a handler or `else:`/`finally:` may bind the loss's names too
    if any(isinstance(h.name, cst.AsName) and isinstance(h.name.name, cst.Name) and h.name.name.value in wanted
           for h in stmt.handlers):
        return None
    body = stmt.body.body
    for j in range(len(body) - 1, -1, -1):
        if assigned_names(body[j]) & wanted and not isinstance(body[j], (cst.FunctionDef, cst.ClassDef)):
            return stmt.body, j
    return None
