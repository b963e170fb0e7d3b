"""Several training `amp.initialize` calls in one block, one per network / optimizer pair (a GAN's generator
and discriminators), sharing apex's one loss scaler.

Each `amp.initialize` call made apex's loss scalers afresh (`num_losses`, default 1: `_amp_state.loss_scalers`
is replaced) and patched its own models and optimizers with the same properties. When the calls follow one
another in one block (nothing but plain assignments between them, so no loss is scaled before the last one
ran), have the same options and the default `num_losses`, every `amp.scale_loss(loss, opt)` after them used
the one scaler the last call made: at each exit it unscaled `opt`'s gradients, checked them, halved or grew
the one scale and skipped `opt`'s next step on an overflow. One GradScaler, stepped and updated after each
loss's backward, does the same (`scaler.step(opt); scaler.update()` per loss), so the first call makes the
scaler and the others only keep their assignments. The shapes where that cannot be shown stay reported
(A2A117 with the reason).
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Set

import libcst as cst

from .amp_inference import is_inference_init
from .names import arg_by, assigned_names, names_read, norm_code
from .walk import iter_nodes

# options that must be spelled the same in every call (each call's properties were its own; the
# scale_loss exits used the last call's)
_MODELS_AND_OPTIMIZERS = {"models", "optimizers"}


def _options(call: cst.Call) -> List[str]:
    return sorted(f"{a.keyword.value}={norm_code(a.value)}" for a in call.args
                  if a.keyword is not None and a.keyword.value not in _MODELS_AND_OPTIMIZERS)


def _names(node: cst.BaseExpression) -> List[str]:
    if isinstance(node, (cst.List, cst.Tuple)):
        return [n for e in node.elements for n in _names(e.value)]
    return [norm_code(node)]


def shared_scaler_refusal(a, inits: Sequence, live: Sequence) -> Optional[str]:
    """None when the module's several `amp.initialize` calls share one GradScaler as they shared apex's
    loss scaler (see the module docstring); otherwise why not."""
    if any(is_inference_init(s.call) for s in inits):
        return "some of them have no optimizers (inference) beside training ones"
    first = inits[0]
    block, start = a.block_of(first.stmt)
    if block is None or any(a.block_of(s.stmt)[0] is not block for s in inits):
        return "they are not in one block"
    idx = sorted(a.block_of(s.stmt)[1] for s in inits)
    mine: Set[int] = {id(s.stmt) for s in inits}
    for stmt in list(block.body)[idx[0]:idx[-1] + 1]:  # type: ignore[attr-defined]
        if id(stmt) in mine:
            continue
        if not isinstance(stmt, cst.SimpleStatementLine) or any(isinstance(n, cst.Call) for n in iter_nodes(stmt)):
            return "code other than plain assignments runs between them (a loss may be scaled before the last one)"
    opts = {tuple(_options(s.call)) for s in inits}
    if len(opts) > 1:
        return "their options differ (each call's opt_level / loss_scale / enabled was its own)"
    read = {n for a_ in first.call.args if a_.keyword is not None and a_.keyword.value not in _MODELS_AND_OPTIMIZERS
            for n in names_read(a_.value)}
    for stmt in list(block.body)[idx[0] + 1:idx[-1]]:  # type: ignore[attr-defined]
        if read & assigned_names(stmt):
            return (f"`{sorted(read & assigned_names(stmt))[0]}`, read by their options, is assigned between them "
                    "(the last call's options governed apex's loss scaling)")
    if any(arg_by(s.call, 99, "num_losses") is not None for s in inits):
        return "one of them sets `num_losses` (each call made that many loss scalers afresh)"
    seen: Set[str] = set()
    for s in inits:
        models, optimizers = arg_by(s.call, 0, "models"), arg_by(s.call, 1, "optimizers")
        names = _names(models.value) + (_names(optimizers.value) if optimizers is not None else [])
        if seen & set(names):
            return f"`{sorted(seen & set(names))[0]}` is passed to more than one of them"
        seen.update(names)
    for s in live:
        if s.kind == "scale_loss":
            lid = arg_by(s.call, 2, "loss_id")
            if lid is not None and not (isinstance(lid.value, cst.Integer) and int(lid.value.value, 0) == 0):
                return f"`amp.scale_loss` with `loss_id={norm_code(lid.value)}` (apex made one loss scaler per call)"
        if s.kind in ("state_dict", "load_state_dict"):
            return f"`amp.{s.kind}` is used (apex's state then holds the last call's scaler only)"
    return None
