"""apex.optimizers.FusedLAMB -> LAMB, a plain-PyTorch class added to the migrated file (A2A307); A2A305
where the class cannot be added (the file binds `LAMB` to something else, or uses FusedLAMB other than
by calling it).

torch.optim has no LAMB. apex's FusedLAMB (apex/optimizers/fused_lamb.py and csrc/multi_tensor_lamb.cu,
the same at 25.05) computes, per step:

    G = L2 norm of every gradient of every group (fp32 and fp16 lists, blended)
    c = G / max_grad_norm if G > max_grad_norm else 1     (max_grad_norm: the constructor's, not a group's)
    per group: t = group["step"] += 1 (kept in the group, so in the state_dict's param_groups)
      per parameter, in fp32:   g = grad / c  (+ weight_decay * p when adam_w_mode=False)
        m = beta1 m + beta3 g   (beta3 = 1 - beta1, or 1 with grad_averaging=False)
        v = beta2 v + (1 - beta2) g^2
        u = (m / bc1) / (sqrt(v / bc2) + eps)  (+ weight_decay * p when adam_w_mode=True)
          (bc = 1 - beta^t, or 1 with bias_correction=False); u is written into the gradient
        r = lr * |p| / |u| when (weight_decay != 0 or use_nvlamb) and both norms are non-zero, else lr
        p = p - r u

The helper below is our own code computing the same thing (no apex file copied); the apex emulation's
FusedLAMB (migrate/verify/shim) is written separately, and tests/test_lamb_runnable.py checks the two
agree within fp32 rounding over several steps. The signature is apex's, so every call keeps its
arguments (amsgrad=True raises as apex did). Under GradScaler, `scaler.step(optimizer)` unscales the
gradients before this step() reads them, as apex amp had when `scale_loss` exited, and skips it on inf/NaN.
"""
from __future__ import annotations

from typing import Optional

import libcst as cst

from .apex_larc import _other_binding
from .base import FIX, rule
from .importing import add_helper_function

LAMB_CLASS = "apex.optimizers.FusedLAMB"
HELPER = "LAMB"

HELPER_CODE = '''class LAMB(torch.optim.Optimizer):
    """LAMB (https://arxiv.org/abs/1904.00962) computed as apex.optimizers.FusedLAMB did, in plain PyTorch
    (added by apex2amp). The gradients of all groups are clipped together to max_grad_norm, the Adam
    update (weight decay decoupled unless adam_w_mode=False) is scaled per parameter by |p| / |update|
    (for groups with weight decay, or all with use_nvlamb=True); the step count lives in each group."""

    def __init__(self, params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01,
                 amsgrad=False, adam_w_mode=True, grad_averaging=True, set_grad_none=True, max_grad_norm=1.0,
                 use_nvlamb=False):
        if amsgrad:
            raise RuntimeError("FusedLAMB does not support the AMSGrad variant.")
        defaults = dict(lr=lr, bias_correction=bias_correction, betas=betas, eps=eps, weight_decay=weight_decay,
                        grad_averaging=grad_averaging, max_grad_norm=max_grad_norm)
        super().__init__(params, defaults)
        self.adam_w_mode = adam_w_mode
        self.set_grad_none = set_grad_none
        self.use_nvlamb = use_nvlamb

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        live = [p for group in self.param_groups for p in group["params"] if p.grad is not None]
        for p in live:
            if p.dtype not in (torch.float32, torch.float16):
                raise RuntimeError("FusedLAMB only support fp16 and fp32.")
            if p.grad.is_sparse:
                raise RuntimeError("FusedLAMB does not support sparse gradients")
        device = self.param_groups[0]["params"][0].device
        norms = []
        for dtype in (torch.float32, torch.float16):
            grads = [p.grad.float() for p in live if p.dtype == dtype]
            squares = sum(torch.sum(g * g) for g in grads) if grads else torch.zeros((), device=device)
            norms.append(torch.sqrt(squares))
        total = torch.sqrt(norms[0] * norms[0] + norms[1] * norms[1])
        limit = self.defaults["max_grad_norm"]
        clip = torch.where(total > limit, total / limit, torch.ones_like(total))
        for group in self.param_groups:
            group["step"] = group.get("step", 0) + 1
            beta1, beta2 = group["betas"]
            decay, lr, eps = group["weight_decay"], group["lr"], group["eps"]
            if group["bias_correction"]:
                b1, b2 = (torch.tensor(b, dtype=torch.float32).item() for b in (beta1, beta2))
                correction1, correction2 = 1 - b1 ** group["step"], 1 - b2 ** group["step"]
            else:
                correction1 = correction2 = 1.0
            beta3 = 1 - beta1 if group["grad_averaging"] else 1.0
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                weight = p.float()
                grad = p.grad.float() / clip
                if decay != 0 and not self.adam_w_mode:
                    grad = grad + decay * weight
                exp_avg = state["exp_avg"].float() * beta1 + beta3 * grad
                exp_avg_sq = state["exp_avg_sq"].float() * beta2 + (1 - beta2) * grad * grad
                update = (exp_avg / correction1) / (torch.sqrt(exp_avg_sq / correction2) + eps)
                if decay != 0 and self.adam_w_mode:
                    update = update + decay * weight
                state["exp_avg"].copy_(exp_avg)
                state["exp_avg_sq"].copy_(exp_avg_sq)
                p.grad.copy_(update)  # apex leaves the update in the gradient
                update = p.grad.float()
                ratio = torch.full((), lr, dtype=torch.float32, device=weight.device)
                if decay != 0 or self.use_nvlamb:
                    w_norm, u_norm = torch.linalg.vector_norm(weight), torch.linalg.vector_norm(update)
                    ratio = torch.where((w_norm != 0) & (u_norm != 0), lr * (w_norm / u_norm), ratio)
                p.copy_(weight - ratio * update)
        return loss
'''

rule("A2A307", "apex-lamb-helper", "apex FusedLAMB -> a LAMB class computing the same, added to the file",
     fixes=True, severity=FIX,
     why="""
torch.optim has no LAMB. apex's FusedLAMB clips all gradients together to max_grad_norm, applies an Adam
update (weight decay decoupled unless adam_w_mode=False) and scales it per parameter by |p| / |update|
(groups with weight decay, or all with use_nvlamb). The tool adds a LAMB class of its own, in plain
PyTorch, that computes the same in fp32 with apex's signature and defaults, and calls it instead; the
optimizer state (exp_avg, exp_avg_sq, each group's step) has apex's layout, so checkpoints carry over.
GradScaler works with it: `scaler.step(optimizer)` unscales the gradients before LAMB's step() reads
them, as apex amp had when `scale_loss` exited. The file must bind `LAMB` to nothing else and use
FusedLAMB only by calling it (A2A305 then).""",
     before="""
import torch
from apex.optimizers import FusedLAMB


def make(params):
    return FusedLAMB(params, lr=1e-3, weight_decay=0.05)""",
     after="import torch\n\n\n" + HELPER_CODE + """

def make(params):
    return LAMB(params, lr=1e-3, weight_decay=0.05)""")


def lamb_refusal(module: cst.Module, res, parent_of) -> Optional[str]:
    """Why FusedLAMB's calls cannot become LAMB's in `module`, or None (`parent_of(node)`: its parent)."""
    if HELPER in res.table.bindings or HELPER in res.defs or _other_binding(module, HELPER):
        return f"the file binds `{HELPER}` to something else"
    why: Optional[str] = None

    class V(cst.CSTVisitor):
        def visit_Import(self, node: cst.Import) -> bool:
            return False

        def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
            return False

        def on_visit(self, node: cst.CSTNode) -> bool:
            nonlocal why
            if why is not None:
                return False
            if isinstance(node, (cst.Import, cst.ImportFrom)):
                return False
            if isinstance(node, (cst.Name, cst.Attribute)) and res.apex_name(node) == LAMB_CLASS:
                parent = parent_of(node)
                called = isinstance(parent, cst.Call) and parent.func is node
                target = isinstance(parent, cst.AssignTarget) and parent.target is node
                if not (called or target):
                    why = f"`{cst.Module([]).code_for_node(node)}` is used other than by a call"
                return False
            return True

    module.visit(V())
    return why


def add_lamb_helper(module: cst.Module) -> cst.Module:
    """`module` with the LAMB class inserted after its imports, once."""
    if any(isinstance(s, cst.ClassDef) and s.name.value == HELPER for s in module.body):
        return module
    return add_helper_function(module, HELPER, HELPER_CODE)
