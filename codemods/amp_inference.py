"""`amp.initialize` for inference: models only, no optimizer, no scaled backward anywhere in the module.

Evaluation scripts initialize each model they load on its own (`[model] = amp.initialize([model],
opt_level="O2")` under `if args.fp16:`, one call per model). Such a call makes no loss-scaling state, so
several of them in one module do not compete for one GradScaler: each becomes its model's autocast
forward (`amp_plan_initialize`, spec 2.6 b). These helpers say when a module is in that form and which
models a call patches.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import libcst as cst

from .names import arg_by, dotted_name, norm_code


def _empty_sequence(node: cst.BaseExpression) -> bool:
    return isinstance(node, (cst.List, cst.Tuple)) and not node.elements


def is_inference_init(call: cst.Call) -> bool:
    """`amp.initialize(models, ...)` with no optimizers (absent, or apex's empty list)."""
    opts = arg_by(call, 1, "optimizers")
    return arg_by(call, 0, "models") is not None and (opts is None or _empty_sequence(opts.value))


def only_inference_inits(sites: Sequence) -> bool:
    """Every amp site of the module is an inference `amp.initialize` (no scale_loss, no state dicts,
    no master_params): the calls share no scaler, so there may be several."""
    return bool(sites) and all(s.kind == "initialize" and is_inference_init(s.call) for s in sites)


def patched_models(target: Optional[cst.BaseExpression], models: cst.BaseExpression
                   ) -> Optional[List[cst.BaseExpression]]:
    """The models whose forward the call patches, each a dotted name: the target's names, or the
    models' when the result is not assigned. A list or tuple of models (`[m] = amp.initialize([m])`)
    gives each of its names, when it holds only names (no nested lists, no starred elements) and, if
    assigned, to a list or tuple of the same length. None when some model is not a plain dotted name."""
    side = target if target is not None else models
    if isinstance(side, (cst.List, cst.Tuple)):
        if not side.elements or any(isinstance(e, cst.StarredElement) for e in side.elements):
            return None
        out = [e.value for e in side.elements]
        if target is not None:
            if not isinstance(models, (cst.List, cst.Tuple)) or len(models.elements) != len(out) or \
                    any(isinstance(e, cst.StarredElement) for e in models.elements):
                return None
    else:
        if target is not None and isinstance(models, (cst.List, cst.Tuple)):
            return None  # `models = amp.initialize([a, b])`: one name for a list
        out = [side]
    if any(dotted_name(m) is None for m in out):
        return None
    if len({norm_code(m) for m in out}) != len(out):
        return None
    return out
