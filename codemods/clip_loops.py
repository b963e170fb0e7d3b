"""Per-optimizer clip loops: one optimizer per model, kept in a dict (XLM-style trainers).

    names = self.optimizers.keys()
    optimizers = [self.optimizers[k] for k in names]
    ...
    for name in names:
        clip_grad_norm_(amp.master_params(self.optimizers[name]), max_norm)
    for optimizer in optimizers:
        optimizer.step()

The clip names each optimizer as `D[k]` (`k` the target of a loop over `N`), the step as the target of a
loop over a list bound to `[D[j] for j in N]`: the same optimizers, each unscaled once in the clip loop
before its step. `indexed` recognises the clip's side; `paired_step` finds the step loop and proves that
it steps those optimizers (`D`, `N` and the list bound once in the function, `D` never assigned into).
"""
from __future__ import annotations

from typing import Optional, Tuple

import libcst as cst

from .names import assigned_names, norm_code
from .walk import iter_nodes


def indexed(a, clip: cst.Call, mp_call: cst.BaseExpression) -> Optional[Tuple[cst.For, str, str]]:
    """(the clip's loop, code of `D`, code of `N`) when `mp_call` is `amp.master_params(D[k])` and `k` is the
    plain target of a `for k in N:` around the clip, within its function, whose body does not rebind `k`."""
    if not isinstance(mp_call, cst.Call) or len(mp_call.args) != 1:
        return None
    opt = mp_call.args[0].value
    if not (isinstance(opt, cst.Subscript) and len(opt.slice) == 1 and
            isinstance(opt.slice[0].slice, cst.Index) and isinstance(opt.slice[0].slice.value, cst.Name)):
        return None
    key = opt.slice[0].slice.value.value  # type: ignore[attr-defined]
    for node in a.index.ancestors(clip):
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return None
        if isinstance(node, cst.For) and isinstance(node.target, cst.Name) and node.target.value == key:
            if key in assigned_names(node.body) or node.orelse is not None:
                return None
            return node, norm_code(opt.value), norm_code(node.iter)
    return None


def _bindings(func: cst.FunctionDef, name: str):
    """The statements of `func` that bind `name` (a plain or dotted name) at their own level."""
    return [n for n in iter_nodes(func) if isinstance(n, (cst.BaseSmallStatement, cst.BaseCompoundStatement))
            and name in assigned_names(n)]


def _assigned_into(func: cst.FunctionDef, d: str) -> bool:
    """Whether `func` assigns or deletes an item of `d` (`D[k] = ...`, `del D[k]`), or calls a mutating
    method on it (`D.pop(...)`, `D.update(...)`)."""
    for n in iter_nodes(func):
        if isinstance(n, (cst.AssignTarget, cst.AugAssign, cst.AnnAssign)) and \
                isinstance(n.target, cst.Subscript) and norm_code(n.target.value) == d:
            return True
        if isinstance(n, cst.Del) and any(isinstance(t, cst.Subscript) and norm_code(t.value) == d
                                          for t in iter_nodes(n.target)):
            return True
        if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and norm_code(n.func.value) == d and \
                n.func.attr.value in ("pop", "popitem", "update", "clear", "setdefault", "__setitem__"):
            return True
    return False


def _list_of(stmt: cst.CSTNode, lst: str) -> Optional[Tuple[str, str]]:
    """(code of `D`, code of `N`) when `stmt` is `lst = [D[j] for j in N]`."""
    if not (isinstance(stmt, cst.Assign) and len(stmt.targets) == 1 and norm_code(stmt.targets[0].target) == lst):
        return None
    comp = stmt.value
    if not (isinstance(comp, cst.ListComp) and comp.for_in.inner_for_in is None and not comp.for_in.ifs and
            isinstance(comp.for_in.target, cst.Name) and comp.for_in.asynchronous is None):
        return None
    elt = comp.elt
    if not (isinstance(elt, cst.Subscript) and len(elt.slice) == 1 and isinstance(elt.slice[0].slice, cst.Index)
            and isinstance(elt.slice[0].slice.value, cst.Name)
            and elt.slice[0].slice.value.value == comp.for_in.target.value):
        return None
    return norm_code(elt.value), norm_code(comp.for_in.iter)


def paired_step(a, clip: cst.Call, mp_call: cst.BaseExpression, func: Optional[cst.FunctionDef]):
    """The step (an entry of `a._steps`) that follows the clip loop and steps the same optimizers, each
    once, in a loop over `L = [D[j] for j in N]`; None when none can be shown to."""
    found = indexed(a, clip, mp_call)
    if found is None or func is None:
        return None
    _, d, n = found
    if _bindings(func, d) or _assigned_into(func, d) or len(_bindings(func, n)) > 1:
        return None
    line = a.ctx.line_of(a.stmt_of(clip))
    best = None
    for s in a._steps:
        loop = a._step_anchors.get(id(s[0]))
        if s[2] is not func or loop is None or not isinstance(loop.iter, cst.Name):
            continue
        binds = _bindings(func, loop.iter.value)
        if len(binds) != 1 or _list_of(binds[0], loop.iter.value) != (d, n):
            continue
        sl = a.ctx.line_of(s[1])
        if sl > line and a.ctx.line_of(binds[0]) < line and (best is None or sl < best[0]):
            best = (sl, s)
    return best[1] if best else None
