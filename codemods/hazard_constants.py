"""Constants fp16 cannot hold: mask values beyond its range (A2A601) and epsilons that vanish or
overflow in hand-cast fp16 code (A2A602)."""
from __future__ import annotations

from typing import Optional

import libcst as cst

from .base import WARNING, rule
from .hazard_state import HazardState
from .names import dotted_name, literal_number

FP16_MAX = 65504.0
MASK_FUNCS = {"masked_fill", "masked_fill_", "fill_", "full", "full_like", "new_full", "where"}

FP16_TINY = 6e-8       # smallest fp16 subnormal is ~5.96e-8: anything below rounds to 0
FP16_INV_TINY = 1.5e-5  # 1/eps above 65504 overflows

rule("A2A601", "fp16-mask-constant", "mask constant outside the fp16 range", fixes=False, severity=WARNING,
     why="""
Under fp16 autocast every matmul output (attention scores) is fp16, whose range ends at 65504.
masked_fill(mask, -1e9) then raises "value cannot be converted to type c10::Half without overflow",
and an additive mask `scores + mask * -1e9` silently becomes -inf (and 0 * -inf is NaN). Use
torch.finfo(scores.dtype).min, or -1e4, which fits fp16.""",
     before="""
import torch


def attend(scores, mask):
    with torch.autocast("cuda", dtype=torch.float16):
        scores = scores.masked_fill(mask == 0, -1e9)
    return scores""",
     after="scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)")
rule("A2A602", "fp16-tiny-eps", "epsilon that vanishes or overflows in fp16", fixes=False, severity=WARNING,
     why="""
In fp16 any eps below ~6e-8 rounds to 0, so `x / (norm + 1e-8)` is NaN for a zero norm, and an eps
below ~1.5e-5 used as a divisor gives 1/eps > 65504 = inf. This file casts tensors to fp16 by hand,
where these guards do nothing. Use eps >= 1e-4 for fp16 tensors, or compute the guard in fp32.""",
     before="x = x / (x.norm(dim=-1, keepdim=True) + 1e-8)",
     after="x = x / (x.float().norm(dim=-1, keepdim=True) + 1e-8).to(x.dtype)")


def _big(node: cst.BaseExpression) -> Optional[str]:
    """A spelled constant that does not fit fp16 (literal, float(...) of one, finfo(float32).min/max, -inf)."""
    v = literal_number(node)
    if v is not None:
        return cst.Module([]).code_for_node(node) if abs(v) > FP16_MAX else None
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        return _big(node.expression)
    if isinstance(node, cst.Call) and dotted_name(node.func) == "float" and len(node.args) == 1:
        inner = node.args[0].value
        s = inner.evaluated_value if isinstance(inner, cst.SimpleString) else None
        if isinstance(s, str) and s.strip().lower() in ("-inf", "inf", "+inf", "-infinity", "infinity"):
            return cst.Module([]).code_for_node(node)
        return _big(inner)
    if isinstance(node, cst.Attribute) and node.attr.value in ("min", "max") and isinstance(node.value, cst.Call):
        f = dotted_name(node.value.func) or ""
        if f.endswith("finfo") and node.value.args:
            d = dotted_name(node.value.args[0].value) or ""
            if d in ("torch.float32", "torch.float", "torch.float64", "torch.double", "np.float32", "numpy.float32"):
                return cst.Module([]).code_for_node(node)
    return None


def _looks_like_mask(node: cst.BaseExpression) -> bool:
    """A 0/1 mask expression: `1 - m`, `~m`, a name mentioning mask, `m.float()` of such."""
    code = cst.Module([]).code_for_node(node).lower()
    if "mask" in code or "pad" in code:
        return True
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Subtract) \
            and literal_number(node.left) == 1.0:
        return True
    return isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.BitInvert)


def _is_inf(code: str) -> bool:
    return "inf" in code.lower()


class ConstantChecks(HazardState):
    """A2A601 and A2A602 on the calls, assignments and arithmetic the lint visits."""

    def _mask_fill(self, node: cst.Call, last: str) -> None:
        """A fill value that does not fit fp16 (`masked_fill(m, -1e9)`)."""
        if self.autocast_file and last in MASK_FUNCS:
            for a in node.args:
                if a.keyword is not None and a.keyword.value not in ("value", "fill_value", "other", "input"):
                    continue
                big = _big(a.value)
                if big and not _is_inf(big):
                    self._report(node, "A2A601", f"{last}(..., {big}): {big} does not fit fp16 (max 65504) and raises "
                                 "or becomes inf under fp16 autocast; use torch.finfo(t.dtype).min or -1e4")

    def _subscript_constant(self, node: cst.Assign) -> None:
        """`t[m] = -1e9`: a value that does not fit fp16 assigned into a tensor."""
        for t in node.targets:
            if isinstance(t.target, cst.Subscript):
                big = _big(node.value)
                if big and not _is_inf(big):
                    self._report(node, "A2A601", f"assigning {big} into a tensor: it does not fit fp16 (max 65504); "
                                 "use torch.finfo(t.dtype).min/max or a value within +-65504")

    def _eps_call(self, node: cst.Call, last: str) -> None:
        """`log(x + eps)`, `sqrt(x + eps)`, `rsqrt(x + eps)` in a file casting to fp16 by hand."""
        if last in ("log", "sqrt", "rsqrt") and node.args and self.fp16_file:
            self._eps(node.args[0].value, node, divisor=last == "rsqrt")

    # arithmetic ----------------------------------------------------------------------------
    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        op = node.operator
        if self.autocast_file and isinstance(op, cst.Multiply):
            for side, other in ((node.left, node.right), (node.right, node.left)):
                big = _big(side)
                v = literal_number(side)
                if big is None and v is not None and abs(v) >= 1e4 and not _looks_like_mask(other):
                    self._report(node, "A2A601", f"{cst.Module([]).code_for_node(side)} times a non-mask tensor: "
                                 "scores of ~10 already overflow fp16 (max 65504) to -inf; multiply a 0/1 mask, "
                                 "or use masked_fill with torch.finfo(scores.dtype).min")
                    break
                if big:
                    what = "0 * -inf is NaN where the mask is 0" if _is_inf(big) else \
                        "the product overflows fp16 (max 65504) to -inf"
                    self._report(node, "A2A601", f"additive mask scaled by {big}: {what}; use "
                                 "torch.finfo(scores.dtype).min with masked_fill, or -1e4")
                    break
        if isinstance(op, cst.Divide) and self.fp16_file:
            self._eps(node.right, node, divisor=True)

    def _eps(self, expr: cst.BaseExpression, at: cst.CSTNode, divisor: bool) -> None:
        if not (isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add)):
            return
        for side in (expr.left, expr.right):
            v = literal_number(side)
            if v is None or v <= 0:
                continue
            if v < FP16_TINY:
                self._report(at, "A2A602", f"eps {v:g} rounds to 0 in fp16 (smallest subnormal ~6e-8), so the guard "
                             "does nothing on fp16 tensors; use eps >= 1e-4 or compute in fp32")
            elif divisor and v < FP16_INV_TINY:
                self._report(at, "A2A602", f"dividing by an eps of {v:g} gives 1/eps > 65504 (inf) in fp16; use "
                             "eps >= 1e-4 or compute in fp32")
