"""A clip on every micro-batch kept where it is, on the scaled gradients, with its threshold times the scale.

apex unscaled the gradients on every `scale_loss` exit, so with gradient accumulation `p.grad` held the
unscaled partial sum `g` and a clip after each micro-batch's backward clipped it in place. Under GradScaler
the scale `S` only changes at `scaler.update()`, so it is the same for every micro-batch of one optimizer
step and `p.grad` holds `S * g`. Clip norms are homogeneous: `clip_grad_norm_(params, max_norm * S)` leaves
`S * clip(g)` (`S` being a power of two, exactly but for the `1e-6` torch adds to the norm in the clip
coefficient, which on scaled gradients weighs `1/S` as much), and `clip_grad_value_(params, clip_value * S)`
exactly; `scaler.step(opt)` unscales once at the boundary.
That is the default fix (A2A148); the unsafe one (A2A145, codemods/accum_clip.py) moves the clip to the
boundary instead. `get_scale()` is 1.0 while the scaler is disabled, so fp32 runs are unchanged.

A used norm (`norm = clip_grad_norm_(...)`) is divided by the scale again: inf and NaN stay visible. On an
overflow the scaled norm is inf, the clip leaves NaN gradients, `scaler.step` skips the step and
`scaler.update()` halves the scale, as apex skipped it (apex lowered its scale at the micro-batch).
"""
from __future__ import annotations

from typing import Optional

import libcst as cst

from .amp_plan_state import optimizer_params, parse_expr
from .names import arg_by

# qualified name -> (threshold position, threshold keyword, returns the norm)
TORCH_CLIPS = {
    "torch.nn.utils.clip_grad_norm_": (1, "max_norm", True),
    "torch.nn.utils.clip_grad.clip_grad_norm_": (1, "max_norm", True),
    "torch.nn.utils.clip_grad_norm": (1, "max_norm", True),
    "torch.nn.utils.clip_grad.clip_grad_norm": (1, "max_norm", True),
    "torch.nn.utils.clip_grad_value_": (1, "clip_value", False),
    "torch.nn.utils.clip_grad.clip_grad_value_": (1, "clip_value", False),
}
_ATOMS = (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.Integer, cst.Float)
_PLAIN_USES = (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.Return, cst.Arg)


def message(opt: str, scaler: str, divided: bool) -> str:
    """The exact fix's finding."""
    return (f"clip on every micro-batch, `{opt}.step()` only at the accumulation boundary: the clip stays on every "
            f"micro-batch, on the scaled gradients, with its threshold times `{scaler}.get_scale()` (constant until "
            f"`{scaler}.update()`), which clips as apex did on its unscaled partial sums (but for the 1e-6 torch "
            "adds to the norm)"
            + ("; the norm it returns is divided by the scale again" if divided else "")
            + f"; `--unsafe-fixes` would instead move it to the boundary after `{scaler}.unscale_({opt})`, once per "
            "step, as PyTorch's AMP recipe does (a different clip); an overflow still skips the step, GradScaler "
            "lowering its scale at the step rather than at the micro-batch as apex did")


def _spec(a, clip: cst.Call):
    for q in a.table.qualified_names(clip.func):
        if q in TORCH_CLIPS:
            return TORCH_CLIPS[q]
    return None


def _scaled(value: cst.BaseExpression, factor: cst.BaseExpression) -> cst.BaseExpression:
    if not isinstance(value, _ATOMS) or value.lpar:
        value = value if value.lpar else value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.BinaryOperation(left=value, operator=cst.Multiply(
        whitespace_before=cst.SimpleWhitespace(" "), whitespace_after=cst.SimpleWhitespace(" ")), right=factor)


def rewritten(a, clip: cst.Call, params: Optional[cst.Arg], mp_opt: Optional[str], scaler: str
              ) -> Optional[cst.BaseExpression]:
    """The clip call as the exact fix writes it (the whole expression that replaces `clip`: the call, or
    the call divided by the scale where its norm is used); None when it is no torch clip this fix knows,
    its threshold is not a plain argument, or clip_grad_value_'s value (None) is used."""
    spec = _spec(a, clip)
    if spec is None or any(x.star for x in clip.args):
        return None
    pos, kw, returns_norm = spec
    thr = arg_by(clip, pos, kw)
    if thr is None:
        return None
    parent = a.parent(clip)
    used = used_norm(a, clip)
    if used and not returns_norm:
        return None
    factor = parse_expr(f"{scaler}.get_scale()")
    args = []
    for x in clip.args:
        if x is thr:
            x = x.with_changes(value=_scaled(x.value, factor))
        elif mp_opt is not None and params is not None and x is params:
            x = x.with_changes(value=optimizer_params(mp_opt))
        args.append(x)
    call = clip.with_changes(args=args, lpar=[], rpar=[])
    if not used:
        return call.with_changes(lpar=clip.lpar, rpar=clip.rpar)
    div = cst.BinaryOperation(left=call, operator=cst.Divide(
        whitespace_before=cst.SimpleWhitespace(" "), whitespace_after=cst.SimpleWhitespace(" ")),
        right=parse_expr(f"{scaler}.get_scale()"))
    plain = isinstance(parent, _PLAIN_USES) and getattr(parent, "value", None) is clip
    if not plain or clip.lpar:
        div = div.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return div


def used_norm(a, clip: cst.Call) -> bool:
    """Whether the clip's return value is used (so the fix divides it by the scale)."""
    return not isinstance(a.parent(clip), cst.Expr)

