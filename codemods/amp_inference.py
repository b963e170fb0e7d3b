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


HALF_HELPER = "half_forward"

HALF_HELPER_CODE = '''def half_forward(forward):
    """`forward` with its floating-point tensor inputs cast to fp16 and its floating-point tensor outputs
    cast to fp32 (added by apex2amp): the forward patch that `amp.initialize` made at opt_level "O3",
    beside its cast of the model to fp16."""

    def cast(value, dtype):
        if isinstance(value, torch.Tensor):
            return value.to(dtype) if value.is_floating_point() else value
        if isinstance(value, tuple) and hasattr(value, "_fields"):
            return type(value)(*(cast(v, dtype) for v in value))
        if isinstance(value, (list, tuple)):
            return type(value)(cast(v, dtype) for v in value)
        if isinstance(value, dict):
            return {key: cast(v, dtype) for key, v in value.items()}
        return value

    def run(*args, **kwargs):
        out = forward(*cast(args, torch.float16), **cast(kwargs, torch.float16))
        return cast(out, torch.float32)

    return run
'''

# the O3 properties an `amp.initialize` keyword may override: the call is then no longer plain O3
O3_OVERRIDES = {"cast_model_type", "patch_torch_functions", "keep_batchnorm_fp32", "master_weights",
                "cast_model_outputs", "enabled"}


def o3_overrides(call: cst.Call) -> List[str]:
    """The keywords of an inference `amp.initialize(..., opt_level="O3")` that change what O3 does (its
    fp16 cast, BatchNorm kept fp32, the fp32 outputs) or make it conditional."""
    return sorted(a.keyword.value for a in call.args if a.keyword is not None and a.keyword.value in O3_OVERRIDES)


def o3_statements(models: Sequence[cst.BaseExpression]) -> List[str]:
    """apex O3 for inference, spelled in plain PyTorch: each model's floating-point parameters and buffers
    cast to fp16 (apex's `model.to(torch.float16)`, every method runs fp16) and its forward patched as
    apex patched it (inputs to fp16, outputs to fp32)."""
    out: List[str] = []
    for m in models:
        mc = norm_code(m)
        out.append(f"{mc}.half()")
        out.append(f"{mc}.forward = {HALF_HELPER}({mc}.forward)")
    return out
