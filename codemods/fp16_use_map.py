"""The hand migration of each use of an FP16_Optimizer the rewrite leaves (A2A502), line by line.

For `T = FP16_Optimizer(inner, ...)` (apex.fp16_utils' class, or a project's copy of it) that is refused,
`use_map(mig, call, target, scaler)` lists each use of T in the module with what it becomes under an fp32
model, torch.autocast and a GradScaler `scaler`:

    T.backward(loss[, update_master_grads=False])  -> scaler.scale(loss).backward()
    T.update_master_grads()                         -> removed (GradScaler keeps no master gradients)
    T.clip_master_grads(n)                          -> scaler.unscale_(T); clip_grad_norm_(<T's params>, n)
    T.step()                                        -> scale_before = scaler.get_scale(); scaler.step(T); scaler.update()
                                                       (the `scale_before` line only where T.overflow is read)
    T.overflow                                      -> scaler.get_scale() < scale_before (the step was skipped:
                                                       GradScaler lowers the scale exactly when it skips)
    T.loss_scale                                    -> scaler.get_scale()
    T.state_dict()                                  -> T.state_dict(), with scaler.state_dict() saved beside it
    T.load_state_dict(sd)                           -> T.load_state_dict(sd) + scaler.load_state_dict(...) (an old
                                                       FP16_Optimizer checkpoint: sd["optimizer_state_dict"], or
                                                       `apex2amp convert-checkpoint`)
    T.optimizer                                     -> T
    T.zero_grad(), T.param_groups, T.state, T passed to a scheduler: unchanged (T is the torch optimizer)
    FP16_Module(model) / model.half() of the trained model: dropped (the model stays fp32)
"""
from __future__ import annotations

from typing import List, Optional

import libcst as cst

from .names import code_of, dotted_name

UNCHANGED = ("zero_grad", "param_groups", "state", "add_param_group")


def use_map(mig, call: cst.Call, target: Optional[str], scaler: str) -> str:
    """"; line by line: ..." for the uses of `target` in `mig`'s module (empty when there are none)."""
    if not target:
        return ""
    items: List[str] = []
    overflow = any(a.attr.value == "overflow" for a in mig._attrs_on(target))
    params = f"[p for g in {target}.param_groups for p in g[\"params\"]]"
    for c in mig.calls:
        name = dotted_name(c.func) or ""
        if name.rsplit(".", 1)[-1] == "FP16_Module" and c.args:
            items.append(f"line {mig.ctx.line_of(c)}: `{code_of(c).strip()}` -> `{code_of(c.args[0].value).strip()}` "
                         "(the model stays fp32)")
    for a in mig._attrs_on(target):
        attr = a.attr.value
        parent = mig.parents.get(a)
        call_of = parent if isinstance(parent, cst.Call) and parent.func is a else None
        line = mig.ctx.line_of(a)
        here = f"line {line}: `{code_of(call_of if call_of is not None else a).strip()}`"
        if attr in UNCHANGED:
            continue
        if attr == "backward" and call_of is not None and call_of.args:
            new = f"`{scaler}.scale({code_of(call_of.args[0].value).strip()}).backward()`"
        elif attr == "update_master_grads" and call_of is not None:
            new = "removed (GradScaler keeps no master gradients)"
        elif attr == "clip_master_grads" and call_of is not None and call_of.args:
            # clip_master_grads(clip, norm_type=2) -> clip_grad_norm_(params, max_norm, norm_type)
            rest = ", ".join((f"norm_type={code_of(x.value).strip()}" if x.keyword is not None
                              and x.keyword.value == "norm_type" else code_of(x.value).strip()) for x in call_of.args)
            new = f"`{scaler}.unscale_({target})` then `torch.nn.utils.clip_grad_norm_({params}, {rest})`"
        elif attr == "step" and call_of is not None and not call_of.args:
            before = "scale_before = " + scaler + ".get_scale(); " if overflow else ""
            new = f"`{before}{scaler}.step({target}); {scaler}.update()`"
        elif attr == "overflow" and call_of is None:
            new = f"`{scaler}.get_scale() < scale_before` (the step was skipped)"
        elif attr == "loss_scale" and call_of is None:
            new = f"`{scaler}.get_scale()`"
        elif attr == "state_dict" and call_of is not None:
            new = f"`{target}.state_dict()`, and save `{scaler}.state_dict()` beside it"
        elif attr == "load_state_dict" and call_of is not None and call_of.args:
            sd = code_of(call_of.args[0].value).strip()
            new = (f"`{target}.load_state_dict({sd})` and `{scaler}.load_state_dict(<its saved state>)`; a checkpoint "
                   f"FP16_Optimizer saved holds the optimizer's under {sd}[\"optimizer_state_dict\"] "
                   "(or convert it with `apex2amp convert-checkpoint`)")
        elif attr == "optimizer" and call_of is None:
            new = f"`{target}`"
        else:
            new = "no GradScaler counterpart: rewrite by hand"
        items.append(f"{here} -> {new}")
    if not items:
        return ""
    flag = _flag_of(mig, call)
    both = (f" (the FP16_Optimizer is made under `if {flag}:`: create the scaler outside that `if`, with "
            f"enabled={flag}, so that lines both paths run, such as {target}.step(), can call it: a disabled scaler "
            "steps the optimizer plainly and scales nothing)") if flag else ""
    return "; line by line" + both + ": " + "; ".join(items)


def _flag_of(mig, call: cst.Call) -> Optional[str]:
    """The test of the innermost `if` whose body holds `call` (not its else), or None."""
    node: cst.CSTNode = call
    while node is not None:
        parent = mig.parents.get(node)
        if isinstance(parent, cst.If) and node is parent.body:
            return code_of(parent.test).strip()
        if isinstance(parent, (cst.FunctionDef, cst.ClassDef, cst.Module)):
            return None
        node = parent
    return None
