"""apex's `num_losses` loss scalers -> one GradScaler per `loss_id` (`scalers[k]`).

apex kept one dynamic loss scaler per loss: `scale_loss(loss, opt, loss_id=k)` scaled by scaler k and, at
its exit, scaler k alone checked `opt`'s gradients, halved its own scale and skipped `opt`'s next step on
an overflow. A GradScaler per loss does the same when each optimizer belongs to one loss and is stepped
(and the scaler updated) through that loss's scaler. One optimizer taking the gradients of every loss id gets
one GradScaler (A2A184). Shapes where neither can be shown are refused (A2A141).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import libcst as cst

from . import amp_rules as R
from .names import arg_by, norm_code
from .walk import iter_nodes


class LossScalers:
    """How many scalers, which one each scale_loss call uses, and which one steps each optimizer."""

    def __init__(self, count: int):
        self.count = count
        self.of_call: Dict[int, int] = {}
        self.of_opt: Dict[str, int] = {}


def _int(node: Optional[cst.Arg]) -> Optional[int]:
    if node is None:
        return None
    v = node.value
    return int(v.value, 0) if isinstance(v, cst.Integer) else None


def plan(a, live: List) -> Optional[LossScalers]:
    """The per-loss scalers of this module, or None when one scaler serves (one loss id in use, bf16, no
    `num_losses`). Refuses (A2A141, `a.abort`) the shapes it cannot map."""
    inits = [s for s in live if s.kind == "initialize"]
    losses = [s for s in live if s.kind == "scale_loss"]
    ids = [(s, arg_by(s.call, 2, "loss_id")) for s in losses]
    given = [(s, x) for s, x in ids if x is not None]
    num = arg_by(inits[0].call, 99, "num_losses") if len(inits) == 1 else None
    if num is None and not given:
        return None
    count = _int(num) if num is not None else 1

    if _one_optimizer_for_all(a, live, inits, losses, num, given):
        a.report(num, R.LOSS_IDS_ONE_SCALER, f"`num_losses={norm_code(num.value)}` loss scalers, one optimizer taking "
                 "the gradients of every loss id -> one GradScaler (the step is skipped on an overflow in any loss, "
                 "as apex skipped it; after one, the halved scale applies to every loss, not only the overflowing "
                 "one)", fixed=True)
        return None

    def refuse(node: cst.CSTNode, why: str, whole: bool = False) -> None:
        a.report(node, R.PER_LOSS_UNSUPPORTED, f"{why} (this module's amp code is left as it is)" if whole else
                 f"{why}: apex kept one loss scaler per loss id; give each loss its own GradScaler by hand "
                 "(this module's amp code is left as it is)")
        a.abort = True

    for s, x in given:
        k = _int(x)
        if k is None:
            refuse(s.call, *why_not_literal(s, x, a.module))
            return None
        if not inits and k != 0:
            refuse(s.call, f"`loss_id={k}` picks one of the loss scalers an `amp.initialize` in another module made")
            return None
    if num is not None and count is None:
        if given:
            refuse(num, "`num_losses` is not an integer literal")
        return None
    if not inits or count is None or count <= 1:
        return None
    out = LossScalers(count)
    for s, x in ids:
        k = _int(x) if x is not None else 0
        if k is None or not 0 <= k < count:
            refuse(s.call, f"`loss_id={k}` is outside `num_losses={count}`")
            return None
        out.of_call[id(s.call)] = k
    if len(set(out.of_call.values())) <= 1 or not a.use_scaler:
        return None  # one loss scaler in use: one GradScaler is the same
    from .amp_plan_state import flatten as _flatten  # the optimizer list as amp.initialize / scale_loss spell it
    for s in losses:
        opt = arg_by(s.call, 1, "optimizers")
        if opt is None:
            refuse(s.call, "`amp.scale_loss` without its optimizers")
            return None
        for e in _flatten(opt.value):
            key, k = norm_code(e), out.of_call[id(s.call)]
            if out.of_opt.setdefault(key, k) != k:
                refuse(s.call, f"`{key}` gets gradients of losses {out.of_opt[key]} and {k}, each with its own "
                               "apex loss scaler; a GradScaler steps an optimizer with one scale")
                return None
    for s in live:
        if s.kind in ("state_dict", "load_state_dict"):
            refuse(s.call, f"`amp.{s.kind}` holds one entry per loss scaler (`loss_scaler0`, `loss_scaler1`, ...)")
            return None
    if a._cross_module_calls():
        refuse(inits[0].call, "the scalers would be passed to functions of other modules, which take one scaler")
        return None
    a.scaler_ref = scaler_name(a)
    a.report(num, R.PER_LOSS_SCALERS, f"`num_losses={count}` -> one GradScaler per loss "
                                      f"(`{a.scaler_ref}[k]` for `loss_id=k`)", fixed=True)
    return out


def _pure(node: cst.CSTNode) -> bool:
    """No call anywhere in the expression (dropping it drops no side effect)."""
    return not any(isinstance(n, cst.Call) for n in iter_nodes(node))


def _plain_ref(node: cst.BaseExpression) -> bool:
    """`optimizer` or `self.optimizer`: the same object at every use (not `optimizers[k]`, not a list)."""
    while isinstance(node, cst.Attribute):
        node = node.value
    return isinstance(node, cst.Name)


def _one_optimizer_for_all(a, live, inits, losses, num, given) -> bool:
    """Whether one GradScaler maps this module's loss ids (A2A184): `num_losses` on its one
    `amp.initialize`, several ids (or a computed one), that initialize and every `scale_loss` on the same
    optimizer name, each id free of calls, no apex state dict."""
    if len(inits) != 1 or num is None or not given or not a.use_scaler:
        return False
    ids = [_int(x) for _, x in given]
    if None not in ids and len(set(ids)) <= 1:
        return False  # one literal id: the paths below map it
    init_opt = arg_by(inits[0].call, 1, "optimizers")
    if init_opt is None or not _plain_ref(init_opt.value):
        return False
    opts = {norm_code(init_opt.value)}
    for s in losses:
        opt = arg_by(s.call, 1, "optimizers")
        if opt is None or not _plain_ref(opt.value):
            return False
        opts.add(norm_code(opt.value))
    if len(opts) != 1 or not all(_pure(x.value) for _, x in given):
        return False
    return not any(s.kind in ("state_dict", "load_state_dict") for s in live)


def scaler_name(a) -> str:
    """A free name for the list of scalers."""
    used = set(a.table.bindings) | a.index.name_values | a.index.attr_values
    return next((c for c in ("scalers", "grad_scalers", "amp_scalers") if c not in used), "amp_grad_scalers")


def _names(node: cst.CSTNode) -> set:
    out = set()

    class _V(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:
            out.add(n.value)
    node.visit(_V())
    return out


def why_not_literal(s, x: cst.Arg, module: cst.Module) -> Tuple[str, bool]:
    """Why a `loss_id` that is not an integer literal cannot be mapped, as precisely as the call shows, and
    whether that text is the whole advice."""
    code = norm_code(x.value)
    params = {p.name.value for p in s.func.params.params} | {p.name.value for p in s.func.params.kwonly_params} \
        if s.func is not None else set()
    if isinstance(x.value, cst.Name) and x.value.value in params:
        fn = s.func.name.value
        got = _caller_ids(module, s.func, x.value.value)
        said = f" (the calls in this module pass {', '.join(got)})" if got else ""
        return (f"`loss_id={code}` is a parameter of `{fn}`, so the loss scaler is picked by its callers{said}; "
                f"pass the GradScaler (`scalers[k]`) to `{fn}` instead of the id", False)
    opt = arg_by(s.call, 1, "optimizers")
    if opt is not None and not (_names(x.value) & _names(opt.value)):
        o = norm_code(opt.value)
        return (f"`loss_id={code}` is not an integer literal while the optimizer `{o}` is one expression: where "
                f"the id takes several values, `{o}` accumulates gradients scaled by several apex loss scalers ("
                + ("with `delay_unscale`, left scaled across loss ids until a non-delayed exit"
                   if arg_by(s.call, 99, "delay_unscale") is not None else
                   "each unscaled with its own scale before they summed")
                + "); a GradScaler steps an optimizer with one scale. Where per-loss scaling "
                f"is not needed, drop `num_losses` and `loss_id` and use one GradScaler", True)
    return (f"`loss_id={code}` is computed at run time; that it stays within `num_losses` and that each "
            f"optimizer is stepped under one id cannot be shown", False)


def _caller_ids(module: cst.Module, func: cst.FunctionDef, param: str) -> List[str]:
    """What the calls of `func` in this module (directly or through `functools.partial(func, ...)`) pass as
    `param`, in source order; empty when a call cannot be read."""
    fn = func.name.value
    pos = [p.name.value for p in func.params.posonly_params] + [p.name.value for p in func.params.params]
    pos = [p for p in pos if p != "self"] if pos[:1] == ["self"] else pos
    if param not in pos:
        return []
    calls: List[cst.Call] = []
    aliases: Dict[str, int] = {}  # a name bound to partial(fn, a, b) -> how many positionals it fixed

    def callee(node: cst.BaseExpression) -> Optional[str]:
        if isinstance(node, cst.Name):
            return node.value
        return node.attr.value if isinstance(node, cst.Attribute) else None

    class _V(cst.CSTVisitor):
        def visit_Assign(self, n: cst.Assign) -> None:
            v = n.value
            if (isinstance(v, cst.Call) and callee(v.func) == "partial" and v.args
                    and callee(v.args[0].value) == fn and len(n.targets) == 1
                    and isinstance(n.targets[0].target, cst.Name)):
                aliases[n.targets[0].target.value] = sum(1 for a in v.args[1:] if a.keyword is None)

        def visit_Call(self, n: cst.Call) -> None:
            calls.append(n)
    module.visit(_V())
    out: List[str] = []
    for c in calls:
        name = callee(c.func)
        if name == fn and name not in aliases:
            shift = 0
        elif name in aliases:
            shift = aliases[name]
        else:
            continue
        got = arg_by(c, pos.index(param) - shift, param)
        if got is None:
            return []
        out.append(norm_code(got.value))
    return out
