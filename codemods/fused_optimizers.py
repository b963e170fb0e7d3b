"""apex fused optimizers -> torch.optim: FusedAdam, FusedSGD, FusedAdagrad rewritten with their
arguments bound by apex's signature (A2A301-A2A304); LAMB, NovoGrad and the contrib distributed
optimizers reported with the nearest option (A2A305); FusedLAMB -> an added LAMB class (A2A307,
codemods/fused_lamb.py) where the file allows it."""
from __future__ import annotations

from typing import Tuple

import libcst as cst

from .apex_modules_state import ModulesRun
from .base import FIX, WARNING, rule
from .call_args import bind_args, literal_bool, rebuild_args
from .fused_lamb import HELPER, LAMB_CLASS, lamb_refusal

rule("A2A301", "fused-adam", "apex FusedAdam -> torch.optim.AdamW / Adam (fused)", fixes=True, severity=FIX,
     why="""
apex.optimizers.FusedAdam is AdamW (decoupled weight decay) unless adam_w_mode=False, with
weight_decay 0.0 by default. torch.optim.AdamW defaults to weight_decay 0.01, so the rewrite always
spells weight_decay out. Positional arguments are bound by apex's signature (lr, bias_correction,
betas, eps, adam_w_mode, weight_decay, ...) and written as keywords. fused=True needs torch >= 2.0 for
AdamW and >= 1.13 for Adam (else foreach=True). set_grad_none is dropped (zero_grad() sets grads to
None by default since torch 2.0). Results are close to apex's but not bitwise identical.""",
     before="""
import torch
from apex.optimizers import FusedAdam


def make(model):
    return FusedAdam(model.parameters(), 1e-3, True, (0.9, 0.98))""",
     after="""
import torch


def make(model):
    return torch.optim.AdamW(model.parameters(), 1e-3, betas=(0.9, 0.98), weight_decay=0.0, fused=True)""")
rule("A2A302", "fused-sgd", "apex FusedSGD -> torch.optim.SGD (fused)", fixes=True, severity=FIX,
     why="""
apex.optimizers.FusedSGD has torch.optim.SGD's leading arguments (lr, momentum, dampening,
weight_decay, nesterov). materialize_master_grads and set_grad_none are dropped. fused=True needs
torch >= 2.3 (else foreach=True). wd_after_momentum=True has no torch equivalent and is reported.""",
     before="""
from apex.optimizers import FusedSGD


def make(model):
    return FusedSGD(model.parameters(), lr=0.1, momentum=0.9)""",
     after="""
import torch


def make(model):
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, fused=True)""")
rule("A2A303", "fused-adagrad", "apex FusedAdagrad -> torch.optim.Adagrad", fixes=True, severity=FIX,
     why="""
apex FusedAdagrad(params, lr, eps, weight_decay) binds its positional arguments differently from
torch.optim.Adagrad(params, lr, lr_decay, weight_decay, initial_accumulator_value, eps), so they are
written as keywords. adagrad_w_mode=True (decoupled weight decay) has no torch equivalent and is reported.""",
     before="""
from apex.optimizers import FusedAdagrad


def make(params):
    return FusedAdagrad(params, 0.01, 1e-10, 1e-4)""",
     after="""
import torch


def make(params):
    return torch.optim.Adagrad(params, 0.01, eps=1e-10, weight_decay=1e-4, foreach=True)""")
rule("A2A304", "apex-optimizer-manual", "apex fused optimizer call that cannot be rewritten safely",
     fixes=False, severity=WARNING,
     why="""
The call uses an argument whose torch equivalent differs (bias_correction=False, master_weights,
wd_after_momentum, adagrad_w_mode, a non-literal adam_w_mode, *args/**kwargs), so rewriting it
could change training. Pick the torch optimizer by hand (the message names it).""",
     before="""
from apex.optimizers import FusedAdam


def make(params, args):
    return FusedAdam(params, lr=1e-3, adam_w_mode=args.adamw)""",
     after="optimizer = (torch.optim.AdamW if args.adamw else torch.optim.Adam)(params, lr=1e-3, weight_decay=0.0)")
rule("A2A305", "apex-optimizer-no-twin", "apex optimizer with no torch equivalent (LAMB, NovoGrad, distributed)",
     fixes=False, severity=WARNING,
     why="""
FusedNovoGrad, FusedMixedPrecisionLamb and the apex.contrib distributed optimizers have no drop-in torch
replacement. Keep apex for them, vendor an implementation, or switch optimizer (the message names the
nearest option). FusedLAMB becomes an added LAMB class (A2A307) unless the file binds `LAMB` or uses
FusedLAMB other than by calling it; it clips the global grad norm itself (max_grad_norm).""",
     before="""
from apex.optimizers import FusedNovoGrad


def make(params):
    return FusedNovoGrad(params, lr=1e-3)""",
     after="# e.g. torch.optim.AdamW(params, lr=..., weight_decay=0.01) (not NovoGrad)")

ADAM_SIG = ("params", "lr", "bias_correction", "betas", "eps", "adam_w_mode", "weight_decay", "amsgrad",
            "set_grad_none", "capturable", "master_weights")
TORCH_ADAM_SIG = ("params", "lr", "betas", "eps", "weight_decay", "amsgrad")
SGD_SIG = ("params", "lr", "momentum", "dampening", "weight_decay", "nesterov", "wd_after_momentum",
           "materialize_master_grads", "set_grad_none")
TORCH_SGD_SIG = ("params", "lr", "momentum", "dampening", "weight_decay", "nesterov")
ADAGRAD_SIG = ("params", "lr", "eps", "weight_decay", "set_grad_none", "adagrad_w_mode")
TORCH_ADAGRAD_SIG = ("params", "lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps")

NO_TWIN_OPTIMIZERS = {
    "apex.optimizers.FusedLAMB": "torch has no LAMB: keep apex's FusedLAMB, vendor a LAMB, or use "
                                 "torch.optim.AdamW plus torch.nn.utils.clip_grad_norm_ (FusedLAMB clips by max_grad_norm itself)",
    "apex.optimizers.FusedNovoGrad": "torch has no NovoGrad: keep apex, vendor one, or use torch.optim.AdamW",
    "apex.optimizers.FusedMixedPrecisionLamb": "torch has no LAMB: keep apex or vendor a LAMB; "
                                               "fp32 master weights are implicit with an fp32 model + autocast",
}
CONTRIB_OPTIMIZER_HINT = ("not a drop-in: use torch.distributed.optim.ZeroRedundancyOptimizer(params, "
                          "optimizer_class=torch.optim.AdamW, ...) or FSDP with a torch optimizer")


class OptimizerRewrites(ModulesRun):
    """FusedAdam, FusedSGD, FusedAdagrad -> torch.optim, or A2A304 / A2A305."""

    def _no_twin_optimizer(self, node: cst.Call, q: str, short: str) -> None:
        if q == LAMB_CLASS and self._ok(node, "A2A307"):
            if self.lamb_why is None:
                self.lamb_why = lamb_refusal(self.res.module, self.res, self.parent_of) or ""
            if not self.lamb_why:
                self.plan.replace_node[node] = node.with_changes(func=cst.Name(HELPER))
                self.needs_torch = self.needs_lamb = True
                # not in migrated_optimizers: LAMB keeps apex's state layout, old checkpoints load (no A2A324)
                self.ctx.report(node, "A2A307", "FusedLAMB -> LAMB, a class computing what apex's did (plain "
                                "PyTorch) added to this file: the same arguments and optimizer state", fixed=True)
                return
        if self._ok(node, "A2A305"):
            why = f" (no LAMB class can be added here: {self.lamb_why})" if q == LAMB_CLASS and self.lamb_why else ""
            self.ctx.report(node, "A2A305", f"{short}: {NO_TWIN_OPTIMIZERS[q]}{why}")

    def _manual(self, node: cst.Call, message: str) -> None:
        if self._ok(node, "A2A304"):
            self.ctx.report(node, "A2A304", message)

    def _fused_flag(self, kind: str, min_fused: Tuple[int, int]) -> Tuple[str, str]:
        return ("fused", "True") if self.min_torch >= min_fused else ("foreach", "True")

    def _adam(self, node: cst.Call) -> None:
        if self.legacy_adam and self.ctx.enabled("A2A501"):
            return  # manual_scaling's fused_fp16_optimizer migrates or reports it with its FP16_Optimizer
        if not self._ok(node, "A2A301"):
            return
        if self.legacy_adam:
            return self._manual(node, "FusedAdam in a module using apex.optimizers.FP16_Optimizer is apex < 0.1's "
                                      "FusedAdam, which that wrapper's step() hands the fp16 gradients and norms: "
                                      "migrate both together (A2A501) or by hand")
        legacy = sorted(a.keyword.value for a in node.args if a.keyword is not None
                        and a.keyword.value in ("max_grad_norm", "eps_inside_sqrt"))
        if legacy:  # apex < 0.1's FusedAdam: it clipped by a norm FP16_Optimizer handed to step()
            no_bias = any(a.keyword is not None and a.keyword.value == "bias_correction"
                          and literal_bool(a.value) is not True for a in node.args)
            tail = ("; bias_correction=False has no torch equivalent (torch Adam always corrects the bias): keep "
                    "apex or port the optimizer") if no_bias else "; then torch.optim.AdamW(..., weight_decay=0.0)"
            return self._manual(node, f"FusedAdam({', '.join(legacy)}=...) is apex < 0.1's FusedAdam, which torch "
                                      "cannot reproduce as one call: max_grad_norm -> torch.nn.utils.clip_grad_norm_"
                                      "(params, max_grad_norm) after scaler.unscale_(optimizer) and before the step; "
                                      "eps_inside_sqrt has no torch option" + tail)
        bound = bind_args(node, ADAM_SIG)
        if bound is None or "params" not in bound:
            return self._manual(node, "FusedAdam: arguments not understood (*args/**kwargs or unknown keyword); "
                                      "use torch.optim.AdamW(..., weight_decay=0.0) (adam_w_mode=True, the default) "
                                      "or torch.optim.Adam (adam_w_mode=False)")
        val = {k: a.value for k, a in bound.items()}
        mode = literal_bool(val.get("adam_w_mode")) if "adam_w_mode" in val else True
        if mode is None:
            return self._manual(node, "FusedAdam with a non-literal adam_w_mode: use torch.optim.AdamW when it is "
                                      "true, torch.optim.Adam when false, with weight_decay written out")
        if "bias_correction" in val and literal_bool(val["bias_correction"]) is not True:
            return self._manual(node, "FusedAdam(bias_correction=False) has no torch equivalent (torch Adam always "
                                      "corrects the bias); keep apex or port the optimizer")
        if "amsgrad" in val and literal_bool(val["amsgrad"]) is not False:
            return self._manual(node, "FusedAdam(amsgrad=...) raised in apex; remove it or use torch.optim.AdamW(amsgrad=True)")
        if "master_weights" in val and literal_bool(val["master_weights"]) is not False:
            return self._manual(node, "FusedAdam(master_weights=True) keeps fp32 master weights; with an fp32 model "
                                      "and autocast use torch.optim.AdamW(..., weight_decay=0.0) and drop it")
        target = "AdamW" if mode else "Adam"
        flag = self._fused_flag(target, (2, 0) if mode else (1, 13))
        extra = [("weight_decay", "0.0"), flag]
        drop = {"bias_correction", "adam_w_mode", "amsgrad", "set_grad_none", "master_weights"}
        if "capturable" in val and literal_bool(val["capturable"]) is False:
            drop.add("capturable")
        args = rebuild_args(node, ADAM_SIG, TORCH_ADAM_SIG, drop, extra)
        self.plan.replace_node[node] = node.with_changes(
            func=self._callee(f"torch.optim.{target}", f"torch.optim.{target}"), args=args)
        note = ""
        sgn = literal_bool(val.get("set_grad_none")) if "set_grad_none" in val else True
        if sgn is False:
            note = "; set_grad_none=False: call zero_grad(set_to_none=False) if code relies on zeroed grads"
        self.migrated_optimizers.append((node, "FusedAdam", target))
        self.ctx.report(node, "A2A301", f"FusedAdam -> torch.optim.{target} with weight_decay explicit and "
                        f"{flag[0]}=True (not bitwise identical to apex){note}", fixed=True)

    def _sgd(self, node: cst.Call) -> None:
        if not self._ok(node, "A2A302"):
            return
        bound = bind_args(node, SGD_SIG)
        if bound is None or "params" not in bound:
            return self._manual(node, "FusedSGD: arguments not understood; use torch.optim.SGD with the same "
                                      "lr, momentum, dampening, weight_decay and nesterov")
        val = {k: a.value for k, a in bound.items()}
        if "wd_after_momentum" in val and literal_bool(val["wd_after_momentum"]) is not False:
            return self._manual(node, "FusedSGD(wd_after_momentum=True) has no torch equivalent (torch applies "
                                      "weight decay before momentum)")
        flag = self._fused_flag("SGD", (2, 3))
        args = rebuild_args(node, SGD_SIG, TORCH_SGD_SIG,
                            {"wd_after_momentum", "materialize_master_grads", "set_grad_none"}, [flag])
        self.plan.replace_node[node] = node.with_changes(func=self._callee("torch.optim.SGD", "torch.optim.SGD"),
                                                         args=args)
        self.ctx.report(node, "A2A302", f"FusedSGD -> torch.optim.SGD with {flag[0]}=True", fixed=True)

    def _adagrad(self, node: cst.Call) -> None:
        if not self._ok(node, "A2A303"):
            return
        bound = bind_args(node, ADAGRAD_SIG)
        if bound is None or "params" not in bound:
            return self._manual(node, "FusedAdagrad: arguments not understood; use torch.optim.Adagrad with "
                                      "lr, eps and weight_decay as keywords")
        val = {k: a.value for k, a in bound.items()}
        if "adagrad_w_mode" in val and literal_bool(val["adagrad_w_mode"]) is not False:
            return self._manual(node, "FusedAdagrad(adagrad_w_mode=True) (decoupled weight decay) has no torch "
                                      "equivalent")
        args = rebuild_args(node, ADAGRAD_SIG, TORCH_ADAGRAD_SIG, {"set_grad_none", "adagrad_w_mode"},
                            [("foreach", "True")])
        self.plan.replace_node[node] = node.with_changes(
            func=self._callee("torch.optim.Adagrad", "torch.optim.Adagrad"), args=args)
        self.migrated_optimizers.append((node, "FusedAdagrad", "Adagrad"))
        self.ctx.report(node, "A2A303", "FusedAdagrad -> torch.optim.Adagrad (arguments as keywords)", fixed=True)
