"""A plain-PyTorch port of apex < 0.1's `apex.optimizers.FusedAdam`, added to a migrated file (A2A306).

pytorch-pretrained-bert era scripts (SpanBERT, BERT-NER) built, under --fp16,
`FusedAdam(groups, lr=lr, bias_correction=False, max_grad_norm=1.0)` wrapped in apex < 0.1's
`apex.optimizers.FP16_Optimizer`, to match BertAdam (no bias correction) on the fp32 path. No torch.optim
class has that update, so the migration keeps the call with its arguments as they were and points it at
`LegacyFusedAdam`, defined at the top of the file. The math is apex's (apex/optimizers/fused_adam.py and
csrc/fused_adam_cuda_kernel.cu before apex 0.1.x's rewrite of 2019-08, commit 690b1f71's parent):

    per param group: norm N of the group's (unscaled) gradients; if max_grad_norm M > 0 and
                     (N + 1e-6) / M > 1, the gradients are divided by that ratio
                     (torch.nn.utils.clip_grad_norm_(group's params, M): g * M / (N + 1e-6), the same)
    m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
    denom = sqrt(v) + eps   (eps_inside_sqrt=True: sqrt(v + eps))
    step_size = lr          (bias_correction=True: lr * sqrt(1 - b2^t) / (1 - b1^t))
    p -= step_size * (m / denom + weight_decay * p)

FP16_Optimizer handed FusedAdam the fp16 gradients still scaled, with `scale=` and each group's norm of
them; under GradScaler, `scaler.step(optimizer)` unscales the fp32 gradients before this step runs (and
skips it on inf/NaN, as the wrapper did), so the port clips and updates unscaled gradients.
"""
from __future__ import annotations

import libcst as cst

from .base import FIX, rule
from .importing import add_helper_function

HELPER = "LegacyFusedAdam"

HELPER_CODE = '''class LegacyFusedAdam(torch.optim.Optimizer):
    """apex < 0.1's FusedAdam in plain PyTorch (added by apex2amp; torch.optim has no Adam without bias
    correction): each param group's gradients clipped to its max_grad_norm (when > 0) by the group's own
    norm, then m / (sqrt(v) + eps) + weight_decay * p applied with step size lr (bias_correction=False) or
    lr * sqrt(1 - beta2^t) / (1 - beta1^t). GradScaler's step unscales the gradients before this step."""

    def __init__(self, params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-8,
                 eps_inside_sqrt=False, weight_decay=0.0, max_grad_norm=0.0, amsgrad=False):
        if amsgrad:
            raise RuntimeError("FusedAdam does not support the AMSGrad variant.")
        defaults = dict(lr=lr, bias_correction=bias_correction, betas=betas, eps=eps,
                        weight_decay=weight_decay, max_grad_norm=max_grad_norm)
        super().__init__(params, defaults)
        self.eps_inside_sqrt = eps_inside_sqrt

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if group["max_grad_norm"] > 0 and params:
                torch.nn.utils.clip_grad_norm_(params, group["max_grad_norm"])
            beta1, beta2 = group["betas"]
            for p in params:
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["step"] += 1
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                exp_avg.mul_(beta1).add_(p.grad, alpha=1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                if self.eps_inside_sqrt:
                    denom = (exp_avg_sq + group["eps"]).sqrt()
                else:
                    denom = exp_avg_sq.sqrt().add_(group["eps"])
                step_size = group["lr"]
                if group["bias_correction"]:
                    t = state["step"]
                    step_size = step_size * (1 - beta2 ** t) ** 0.5 / (1 - beta1 ** t)
                p.add_(exp_avg / denom + group["weight_decay"] * p, alpha=-step_size)
        return loss
'''


def add_helper_class(module: cst.Module, code: str = HELPER_CODE) -> cst.Module:
    """`module` with the LegacyFusedAdam class inserted after its imports, once."""
    if any(isinstance(s, cst.ClassDef) and s.name.value == HELPER for s in module.body):
        return module
    return add_helper_function(module, HELPER, code)


_TRAIN_AFTER = """
def train(args, model, batches, lr):
    if args.fp16:
        optimizer = LegacyFusedAdam(model.parameters(), lr=lr, bias_correction=False, max_grad_norm=1.0)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    scaler = torch.amp.GradScaler("cuda", init_scale=2.0**16, growth_interval=1000,
                                  enabled=args.fp16)
    for x, y in batches:
        with torch.autocast("cuda", dtype=torch.float16, enabled=args.fp16):
            loss = torch.nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()"""

rule("A2A306", "legacy-fused-adam-port", "apex < 0.1 FusedAdam(bias_correction=False, max_grad_norm, eps_inside_sqrt) "
     "under its FP16_Optimizer -> an added plain-PyTorch port (LegacyFusedAdam)", fixes=True, severity=FIX,
     why="""
pytorch-pretrained-bert era scripts built `FusedAdam(groups, lr=lr, bias_correction=False, max_grad_norm=1.0)`
under --fp16 and wrapped it in apex < 0.1's apex.optimizers.FP16_Optimizer. torch.optim has no Adam without
bias correction (AdamW's updates would be sqrt(1 - b2^t) / (1 - b1^t) times these: about 1/3 at the first
step, 1/6 around step 10, 1/3 at step 100), and FusedAdam clipped each param group by its own norm.
The migration (with A2A501: fp32 model, autocast, GradScaler) keeps the call and its arguments and
points it at LegacyFusedAdam, a class added to the file with apex's update: per group
clip_grad_norm_(group, max_grad_norm), m / (sqrt(v) + eps) + weight_decay * p at step size lr (or lr *
sqrt(1 - b2^t) / (1 - b1^t) with bias_correction=True). scaler.step(optimizer) unscales the gradients
before the port's step and skips it on inf/NaN, as the wrapper did. Checkpointed optimizer state
(exp_avg, exp_avg_sq, step per parameter) has apex's FusedAdam keys, per parameter instead of per group.""",
     before="""
import torch


def train(args, model, batches, lr):
    if args.fp16:
        model.half()
    if args.fp16:
        from apex.optimizers import FP16_Optimizer, FusedAdam
        optimizer = FusedAdam(model.parameters(), lr=lr, bias_correction=False, max_grad_norm=1.0)
        optimizer = FP16_Optimizer(optimizer, dynamic_loss_scale=True)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for x, y in batches:
        loss = torch.nn.functional.mse_loss(model(x), y)
        if args.fp16:
            optimizer.backward(loss)
        else:
            loss.backward()
        optimizer.step()
        optimizer.zero_grad()""",
     after="import torch\n\n\n" + HELPER_CODE + "\n\n" + _TRAIN_AFTER.lstrip("\n"))
