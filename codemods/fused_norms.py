"""apex fused norms -> torch.nn: FusedLayerNorm, MixedFusedLayerNorm, FastLayerNorm -> LayerNorm
(A2A310), FusedRMSNorm -> RMSNorm (A2A311), the functional norms -> torch.nn.functional with apex's
eps (A2A312), and what the target torch cannot take (A2A313)."""
from __future__ import annotations

from typing import Sequence

import libcst as cst

from . import templates
from .apex_modules_state import ModulesRun
from .base import FIX, WARNING, rule
from .call_args import bind_args, literal_bool, rebuild_args
from .names import code_of

rule("A2A310", "fused-layer-norm", "apex FusedLayerNorm / MixedFusedLayerNorm / FastLayerNorm -> torch.nn.LayerNorm",
     fixes=True, severity=FIX,
     why="""
torch.nn.LayerNorm has the same parameters (weight, bias), so state dicts load unchanged.
memory_efficient is dropped. Under autocast apex returned the autocast dtype while torch's
layer_norm runs in fp32; MixedFusedLayerNorm returned the parameter dtype. Subclasses get the new base.
`isinstance(m, FusedLayerNorm)` / `issubclass` checks (BERT's `init_weights`) name torch.nn.LayerNorm
too, since the migrated code builds torch LayerNorms; a check stays (A2A118) while the module still
builds an apex norm that could not be migrated, or uses an apex norm class as a value
(`norm = FusedLayerNorm if fused else nn.LayerNorm`, `partial(FusedLayerNorm, ...)`). A rewritten
check also matches LayerNorms that were torch's before: for weight initialisation they get the
values torch gives them anyway.""",
     before="""
import torch
from apex.normalization import FusedLayerNorm


class Block(torch.nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.ln = FusedLayerNorm(hidden, eps=1e-12)""",
     after="""
import torch


class Block(torch.nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.ln = torch.nn.LayerNorm(hidden, eps=1e-12)""")
rule("A2A311", "fused-rms-norm", "apex FusedRMSNorm / MixedFusedRMSNorm -> torch.nn.RMSNorm (torch >= 2.4)",
     fixes=True, severity=FIX,
     why="""
torch.nn.RMSNorm exists from torch 2.4. Its eps defaults to None (finfo(dtype).eps), apex's to 1e-5,
so eps is always written out. Below --min-torch 2.4 the call is reported instead.""",
     before="""
from apex.normalization import FusedRMSNorm

norm = FusedRMSNorm(4096)""",
     after="""
import torch

norm = torch.nn.RMSNorm(4096, eps=1e-5)""")
rule("A2A312", "fused-norm-functional", "apex fused_layer_norm / fused_rms_norm functions -> torch.nn.functional",
     fixes=True, severity=FIX,
     why="""
The apex functional norms default to eps=1e-6 (the modules to 1e-5) and take (input, weight, bias,
shape) in a different order from F.layer_norm(input, shape, weight, bias, eps). The rewrite reorders
the arguments and always writes eps. F.rms_norm needs torch >= 2.4.""",
     before="""
from apex.normalization.fused_layer_norm import fused_layer_norm_affine


def f(x, w, b):
    return fused_layer_norm_affine(x, w, b, (1024,))""",
     after="""
import torch


def f(x, w, b):
    return torch.nn.functional.layer_norm(x, (1024,), w, b, eps=1e-6)""")
rule("A2A313", "apex-norm-manual", "apex norm that cannot be rewritten for the target torch", fixes=False,
     severity=WARNING,
     why="""
torch.nn.RMSNorm and F.rms_norm need torch >= 2.4, and some arguments (elementwise_affine=False on the
Mixed* norms, *args) have no exact equivalent. Raise --min-torch, or replace the norm by hand.""",
     before="norm = FusedRMSNorm(1024)  # with --min-torch 2.1",
     after="# torch.nn.RMSNorm(1024, eps=1e-5) needs torch >= 2.4; keep a local RMSNorm module")

LN_SIG = ("normalized_shape", "eps", "elementwise_affine", "memory_efficient")
MIXED_LN_SIG = ("normalized_shape", "eps", "memory_efficient", "elementwise_affine")
TORCH_LN_SIG = ("normalized_shape", "eps", "elementwise_affine")

LAYER_NORMS = {"apex.normalization.FusedLayerNorm": LN_SIG, "apex.normalization.MixedFusedLayerNorm": MIXED_LN_SIG,
               "apex.contrib.layer_norm.FastLayerNorm": ("hidden_size", "eps")}
RMS_NORMS = {"apex.normalization.FusedRMSNorm": LN_SIG, "apex.normalization.MixedFusedRMSNorm": MIXED_LN_SIG}
FUNCTIONAL = {
    # apex name: (apex signature, torch functional, torch positional order)
    "apex.normalization.fused_layer_norm.fused_layer_norm_affine":
        (("input", "weight", "bias", "normalized_shape", "eps", "memory_efficient"), "layer_norm",
         ("input", "normalized_shape", "weight", "bias")),
    "apex.normalization.fused_layer_norm.fused_layer_norm":
        (("input", "normalized_shape", "eps", "memory_efficient"), "layer_norm", ("input", "normalized_shape")),
    "apex.normalization.fused_layer_norm.fused_rms_norm_affine":
        (("input", "weight", "normalized_shape", "eps", "memory_efficient"), "rms_norm",
         ("input", "normalized_shape", "weight")),
    "apex.normalization.fused_layer_norm.fused_rms_norm":
        (("input", "normalized_shape", "eps", "memory_efficient"), "rms_norm", ("input", "normalized_shape")),
}


class NormRewrites(ModulesRun):
    """The calls of apex's norm modules and functional norms."""

    def _norm(self, node: cst.Call, q: str, sig: Sequence[str], target: str, rms: bool) -> None:
        short = q.rsplit(".", 1)[-1]
        if rms and self.min_torch < (2, 4):
            if self._ok(node, "A2A313"):
                self.ctx.report(node, "A2A313", f"{short}: torch.nn.RMSNorm needs torch >= 2.4 (--min-torch is "
                                f"{self.min_torch[0]}.{self.min_torch[1]}); keep a local RMSNorm or raise --min-torch")
            return
        code = "A2A311" if rms else "A2A310"
        if not self._ok(node, code):
            return
        bound = bind_args(node, sig)
        if bound is None:
            if self._ok(node, "A2A313"):
                self.ctx.report(node, "A2A313", f"{short}: arguments not understood; use {target} with the same "
                                "normalized_shape and eps (apex default 1e-5)")
            return
        val = {k: a.value for k, a in bound.items()}
        if short.startswith("Mixed") and "elementwise_affine" in val and literal_bool(val["elementwise_affine"]) is not True:
            if self._ok(node, "A2A313"):
                self.ctx.report(node, "A2A313", f"{short}(elementwise_affine=...) raised in apex; use {target} by hand")
            return
        torch_sig = ("normalized_shape", "eps", "elementwise_affine")
        apex_sig = tuple("normalized_shape" if s == "hidden_size" else s for s in sig)
        if "hidden_size" in bound:
            bound["normalized_shape"] = bound.pop("hidden_size")
        extra = [("eps", "1e-5")] if rms else []
        args = rebuild_args(node, apex_sig, torch_sig, {"memory_efficient"}, extra)
        self.plan.replace_node[node] = node.with_changes(func=self._callee(target, target), args=args)
        note = " (eps written out: torch's default is None)" if rms else ""
        self.ctx.report(node, code, f"{short} -> {target}{note}; under autocast the output is fp32 (apex returned "
                        "the autocast/param dtype)", fixed=True)

    def _functional(self, node: cst.Call, q: str) -> None:
        sig, fname, order = FUNCTIONAL[q]
        short = q.rsplit(".", 1)[-1]
        if fname == "rms_norm" and self.min_torch < (2, 4):
            if self._ok(node, "A2A313"):
                self.ctx.report(node, "A2A313", f"{short}: torch.nn.functional.rms_norm needs torch >= 2.4")
            return
        if not self._ok(node, "A2A312"):
            return
        bound = bind_args(node, sig)
        if bound is None or any(p not in bound for p in order):
            if self._ok(node, "A2A313"):
                self.ctx.report(node, "A2A313", f"{short}: arguments not understood; use "
                                f"torch.nn.functional.{fname} with eps=1e-6 (apex's functional default)")
            return
        parts = [code_of(bound[p].value) for p in order]
        eps = code_of(bound["eps"].value) if "eps" in bound else "1e-6"
        func = self.res.spelling(f"torch.nn.functional.{fname}", f"torch.nn.functional.{fname}")
        if func.startswith("torch."):
            self.needs_torch = True
        new = templates.expression(f"{func}({', '.join(parts)}, eps={eps})")
        self.plan.replace_node[node] = new
        self.ctx.report(node, "A2A312", f"{short} -> torch.nn.functional.{fname} (arguments reordered, eps={eps} "
                        "written out)", fixed=True)
