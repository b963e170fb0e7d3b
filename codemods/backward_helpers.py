"""Backward helpers across modules: `def backward(loss, optimizer, args)` in utils.py holds `amp.scale_loss`,
the clip and `optimizer.step()` are in the caller's loop in train.py, where `amp.initialize` is.

The helper's module (no `amp.initialize`, no step of the optimizer) migrates its backward to
`scaler.scale(loss).backward()` with a new `scaler` parameter, and publishes the helper in the repo facts
(`RepoFacts.extra["backward_helpers:<module key>"] = {function: [loss slot, optimizer slot]}`). A caller
module that imports the helper (pass 2) passes `scaler=scaler`, wraps the forward and loss it passes in
`torch.autocast`, and treats the call as the backward of that optimizer: the step becomes `scaler.step` +
`scaler.update`, a clip gets `scaler.unscale_` first. Recognised only when each `scale_loss` of the module
sits in a module-level function whose loss and optimizer are both its parameters, passed by name.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import libcst as cst

PREFIX = "backward_helpers:"
HELD = "backward_helpers_held:"  # told by migrate/helper_groups.py: a caller keeps its amp code


def helper_slots(func: Optional[cst.FunctionDef], loss: Optional[cst.BaseExpression],
                 opt: Optional[cst.BaseExpression]) -> Optional[Tuple[int, int]]:
    """(loss slot, optimizer slot) when `func` takes both the loss and the optimizer as parameters."""
    if func is None or not isinstance(loss, cst.Name) or not isinstance(opt, cst.Name):
        return None
    params = [p.name.value for p in func.params.params]
    if func.params.star_arg is not None and not isinstance(func.params.star_arg, cst.MaybeSentinel):
        return None
    if loss.value not in params or opt.value not in params or loss.value == opt.value:
        return None
    return params.index(loss.value), params.index(opt.value)


def publish(exported: Any, key: str, helpers: Dict[str, Tuple[int, int]]) -> None:
    exported.extra[PREFIX + key] = {f: list(s) for f, s in helpers.items()}


def known(facts: Any, visible: Dict[str, Tuple[str, Sequence[str]]]) -> Dict[str, Tuple[int, int]]:
    """Qualified `module.function` -> (loss slot, optimizer slot) of the helpers visible from this file
    (`visible`: facts key -> (module name, functions), as `amp_plan_threading.visible_modules` gives)."""
    out: Dict[str, Tuple[int, int]] = {}
    for key, (mod, _) in visible.items():
        for fn, slots in (facts.extra.get(PREFIX + key) or {}).items():
            out[f"{mod}.{fn}"] = (int(slots[0]), int(slots[1]))
    return out


def call_arg(call: cst.Call, slot: int, name: str) -> Optional[cst.BaseExpression]:
    """The argument filling parameter `slot` (named `name`) of a helper call, or None."""
    for a in call.args:
        if a.keyword is not None and a.keyword.value == name:
            return a.value
    positional: List[cst.Arg] = []
    for a in call.args:
        if a.star:
            return None
        if a.keyword is None:
            positional.append(a)
    return positional[slot].value if slot < len(positional) else None
