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
    """apex FusedLAMB, laid out as apex's multi-tensor code (fused_lamb.py + multi_tensor_lamb.cu): one L2 norm
    per dtype list blended into the global norm, then per group and dtype list a stage 1 (clipped Adam
    update written over the gradients) and a stage 2 (trust ratio |p| / |update|, then p -= ratio * update).
    Written apart from codemods/fused_lamb.py's LAMB so that the two check each other."""

    def __init__(self, params, lr=1e-3, bias_correction=True, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01,
                 amsgrad=False, adam_w_mode=True, grad_averaging=True, set_grad_none=True, max_grad_norm=1.0,
                 use_nvlamb=False):
        if amsgrad:
            raise RuntimeError("FusedLAMB does not support the AMSGrad variant.")
        super().__init__(params, dict(lr=lr, bias_correction=bias_correction, betas=betas, eps=eps,
                                      weight_decay=weight_decay, grad_averaging=grad_averaging,
                                      max_grad_norm=max_grad_norm))
        self.adam_w_mode = 1 if adam_w_mode else 0
        self.set_grad_none = set_grad_none
        self.use_nvlamb = use_nvlamb

    def zero_grad(self):
        if self.set_grad_none:
            for group in self.param_groups:
                for p in group["params"]:
                    p.grad = None
        else:
            super().zero_grad()

    @staticmethod
    def _l2norm(tensors):
        """multi_tensor_l2norm: fp32 sum of squares over every element of the list, then its root."""
        flat = torch.cat([t.detach().reshape(-1).to(torch.float32) for t in tensors])
        return torch.dot(flat, flat).sqrt().reshape(1)

    def _lamb(self, lists, lr, beta1, beta2, eps, step, bias_correction, decay, grad_averaging, global_norm,
              max_norm):
        g_list, p_list, m_list, v_list = lists
        b1, b2 = float(torch.tensor(beta1, dtype=torch.float32)), float(torch.tensor(beta2, dtype=torch.float32))
        c1 = 1 - b1 ** step if bias_correction else 1.0
        c2 = 1 - b2 ** step if bias_correction else 1.0
        beta3 = 1 - beta1 if grad_averaging else 1.0
        p_norms = [torch.linalg.vector_norm(p.to(torch.float32)) for p in p_list]
        clipped = global_norm / max_norm if bool(global_norm > max_norm) else torch.ones_like(global_norm)
        for g, p, m, v in zip(g_list, p_list, m_list, v_list):  # stage 1
            pf = p.to(torch.float32) if decay != 0 else torch.zeros_like(p, dtype=torch.float32)
            sg = g.to(torch.float32) / clipped
            if self.adam_w_mode == 0:
                sg = sg + decay * pf
            mf = m.to(torch.float32) * beta1 + beta3 * sg
            vf = v.to(torch.float32) * beta2 + (1 - beta2) * sg * sg
            out = (mf / c1) / (torch.sqrt(vf / c2) + eps)
            if self.adam_w_mode == 1:
                out = out + decay * pf
            g.copy_(out)
            m.copy_(mf)
            v.copy_(vf)
        for g, p, pn in zip(g_list, p_list, p_norms):  # stage 2
            ratio = torch.tensor(lr, dtype=torch.float32)
            if self.use_nvlamb or decay != 0.0:
                un = torch.linalg.vector_norm(g.to(torch.float32))
                if bool(un != 0) and bool(pn != 0):
                    ratio = lr * (pn / un)
            p.copy_(p.to(torch.float32) - ratio * g.to(torch.float32))

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        g_all_32, g_all_16 = [], []
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.dtype == torch.float32:
                    g_all_32.append(p.grad)
                elif p.dtype == torch.float16:
                    g_all_16.append(p.grad)
                else:
                    raise RuntimeError("FusedLAMB only support fp16 and fp32.")
        device = self.param_groups[0]["params"][0].device
        norm_32 = self._l2norm(g_all_32) if g_all_32 else torch.zeros(1, device=device)
        norm_16 = self._l2norm(g_all_16) if g_all_16 else torch.zeros(1, device=device)
        global_norm = self._l2norm([norm_32, norm_16])
        max_norm = self.defaults["max_grad_norm"]
        for group in self.param_groups:
            group["step"] = group["step"] + 1 if "step" in group else 1
            beta1, beta2 = group["betas"]
            by_dtype = {torch.float16: ([], [], [], []), torch.float32: ([], [], [], [])}
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if len(state) == 0:
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                lists = by_dtype[p.dtype]
                for lst, t in zip(lists, (p.grad, p, state["exp_avg"], state["exp_avg_sq"])):
                    lst.append(t)
            for dtype in (torch.float16, torch.float32):
                if by_dtype[dtype][0]:
                    self._lamb(by_dtype[dtype], group["lr"], beta1, beta2, group["eps"], group["step"],
                               group["bias_correction"], group["weight_decay"], group["grad_averaging"],
                               global_norm, max_norm)
        return loss
