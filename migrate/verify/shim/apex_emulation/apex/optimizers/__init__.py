"""Emulated apex.optimizers: FusedAdam (AdamW mode by default), FusedSGD, FusedLAMB, FusedAdagrad by torch code."""
import torch


class FusedAdam(torch.optim.AdamW):
    """apex FusedAdam: adam_w_mode=True (decoupled weight decay) by default, weight_decay 0."""

    def __init__(self, params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-8, adam_w_mode=True,
                 weight_decay=0., amsgrad=False, set_grad_none=True, capturable=False, master_weights=False):
        if amsgrad:
            raise RuntimeError("FusedAdam does not support the AMSGrad variant.")
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        if not adam_w_mode:  # L2 mode: plain Adam
            self.__class__ = _FusedAdamL2


class _FusedAdamL2(torch.optim.Adam):
    pass


class FusedSGD(torch.optim.SGD):
    """apex FusedSGD by torch SGD."""

    def __init__(self, params, lr=1e-3, momentum=0., dampening=0., weight_decay=0., nesterov=False,
                 wd_after_momentum=False, materialize_master_grads=True, set_grad_none=False):
        super().__init__(params, lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                         nesterov=nesterov)


class FusedAdagrad(torch.optim.Adagrad):
    """apex FusedAdagrad by torch Adagrad."""

    def __init__(self, params, lr=1e-2, eps=1e-10, weight_decay=0., set_grad_none=True, adagrad_w_mode=False):
        super().__init__(params, lr=lr, eps=eps, weight_decay=weight_decay)


class FusedLAMB(torch.optim.Optimizer):
    """LAMB in plain torch (global grad-norm clipping to max_grad_norm, AdamW-style update, trust ratio)."""

    def __init__(self, params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01,
                 amsgrad=False, adam_w_mode=True, grad_averaging=True, set_grad_none=True, max_grad_norm=1.0,
                 use_nvlamb=False):
        defaults = dict(lr=lr, bias_correction=bias_correction, betas=betas, eps=eps, weight_decay=weight_decay,
                        grad_averaging=grad_averaging, max_grad_norm=max_grad_norm)
        super().__init__(params, defaults)
        self.use_nvlamb = use_nvlamb

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        if not grads:
            return loss
        global_norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads]))
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            clip = max(1.0, float(global_norm) / group["max_grad_norm"]) if group["max_grad_norm"] > 0 else 1.0
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad / clip
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.mul_(beta1).add_(grad, alpha=1 - beta1 if group["grad_averaging"] else 1.0)
                v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                if group["bias_correction"]:
                    m_hat = m / (1 - beta1 ** state["step"])
                    v_hat = v / (1 - beta2 ** state["step"])
                else:
                    m_hat, v_hat = m, v
                update = m_hat / (v_hat.sqrt() + group["eps"])
                if group["weight_decay"]:
                    update = update + group["weight_decay"] * p
                w_norm, u_norm = p.norm(), update.norm()
                trust = (w_norm / u_norm) if (w_norm > 0 and u_norm > 0 and
                                              (self.use_nvlamb or group["weight_decay"])) else 1.0
                p.add_(update, alpha=-group["lr"] * float(trust))
        return loss
