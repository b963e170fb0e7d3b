"""Emulated apex.parallel.LARC: what apex's LARC wrapper computes (layer-wise adaptive rate scaling of
the gradients, the wrapped optimizer's weight decay folded in, https://arxiv.org/abs/1708.03888),
written for the verification harness."""
import torch


def _scale_gradients(groups, trust_coefficient, clip, eps):
    """Fold each group's weight decay into its gradients and scale them by the adaptive rate; return the
    decays (the wrapped optimizer then steps with weight decay 0)."""
    decays = []
    for group in groups:
        decay = group["weight_decay"] if "weight_decay" in group else 0
        decays.append(decay)
        group["weight_decay"] = 0
        for param in group["params"]:
            grad = param.grad
            if grad is None:
                continue
            p_norm = torch.norm(param.data)
            g_norm = torch.norm(grad.data)
            if p_norm != 0 and g_norm != 0:
                local = trust_coefficient * p_norm / (g_norm + p_norm * decay + eps)
                if clip:
                    local = min(local / group["lr"], 1)
                grad.data += decay * param.data
                grad.data *= local
    return decays


class LARC(object):
    """apex.parallel.LARC(optimizer, trust_coefficient=0.02, clip=True, eps=1e-8)."""

    def __init__(self, optimizer, trust_coefficient=0.02, clip=True, eps=1e-8):
        self.optim = optimizer
        self.trust_coefficient = trust_coefficient
        self.eps = eps
        self.clip = clip

    param_groups = property(lambda self: self.optim.param_groups,
                            lambda self, value: setattr(self.optim, "param_groups", value))
    state = property(lambda self: self.optim.state)

    def __repr__(self):
        return self.optim.__repr__()

    def state_dict(self):
        return self.optim.state_dict()

    def load_state_dict(self, state_dict):
        self.optim.load_state_dict(state_dict)

    def zero_grad(self):
        self.optim.zero_grad()

    def add_param_group(self, param_group):
        self.optim.add_param_group(param_group)

    def step(self):
        with torch.no_grad():
            decays = _scale_gradients(self.optim.param_groups, self.trust_coefficient, self.clip, self.eps)
        self.optim.step()
        for group, decay in zip(self.optim.param_groups, decays):
            group["weight_decay"] = decay
