"""Emulated apex.fp16_utils: to_python_float, network_to_half, FP16_Optimizer (fp32 master weights, loss scaling)."""
import sys

import torch
import torch.nn as nn


def to_python_float(t):
    """t.item() for tensors, t for numbers."""
    return t.item() if hasattr(t, "item") else t


class tofp16(nn.Module):
    """Casts its input to fp16."""

    def forward(self, input):
        return input.half()


def BN_convert_float(module):
    """Keep affine BatchNorm layers in fp32."""
    if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.affine:
        module.float()
    for child in module.children():
        BN_convert_float(child)
    return module


def network_to_half(network):
    """nn.Sequential(tofp16(), network.half() with fp32 BatchNorm), as apex did."""
    return nn.Sequential(tofp16(), BN_convert_float(network.half()))


def convert_network(network, dtype):
    """Cast the network to dtype except affine BatchNorm layers."""
    for m in network.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.affine:
            continue
        for p in m.parameters(recurse=False):
            p.data = p.data.to(dtype)
    return network


def clip_grad_norm(parameters, max_norm, norm_type=2):
    return torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type)


class DynamicLossScaler(object):
    """FP16_Optimizer's scaler: 2**32 start, x2 every 1000 clean steps, /2 on overflow, floor 1."""

    def __init__(self, init_scale=2 ** 32, scale_factor=2., scale_window=1000):
        self.cur_scale = init_scale
        self.cur_iter = 0
        self.last_overflow_iter = -1
        self.scale_factor = scale_factor
        self.scale_window = scale_window

    @property
    def loss_scale(self):
        return self.cur_scale

    def update_scale(self, overflow):
        if overflow:
            self.cur_scale = max(self.cur_scale / self.scale_factor, 1)
            self.last_overflow_iter = self.cur_iter
        elif (self.cur_iter - self.last_overflow_iter) % self.scale_window == 0:
            self.cur_scale *= self.scale_factor
        self.cur_iter += 1


class FP16_Optimizer(object):
    """Wraps an optimizer over fp16 params: fp32 masters, backward(loss) with scaling, skip on overflow."""

    def __init__(self, init_optimizer, static_loss_scale=1.0, dynamic_loss_scale=False, dynamic_loss_args=None,
                 verbose=True):
        self.optimizer = init_optimizer
        self.pairs = []
        for group in init_optimizer.param_groups:
            for i, p in enumerate(group["params"]):
                if p.dtype == torch.float16:
                    master = p.detach().clone().float().requires_grad_(True)
                    group["params"][i] = master
                    self.pairs.append((p, master))
        self.fp32_params = [p for g in init_optimizer.param_groups for p in g["params"]]
        self.dynamic_loss_scale = dynamic_loss_scale
        self.loss_scaler = DynamicLossScaler(**(dynamic_loss_args or {})) if dynamic_loss_scale else None
        self.static_scale = static_loss_scale
        self.overflow = False
        probe = sys.modules.get("_apex2amp_probe")
        if probe is not None:
            probe.register_managed(init_optimizer)

    @property
    def loss_scale(self):
        return self.loss_scaler.loss_scale if self.loss_scaler else self.static_scale

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    @property
    def state(self):
        return self.optimizer.state

    def zero_grad(self, set_grads_to_None=False):
        for p in self.fp32_params:
            p.grad = None
        for model_p, _ in self.pairs:
            model_p.grad = None

    def backward(self, loss, update_master_grads=True, retain_graph=False):
        probe = sys.modules.get("_apex2amp_probe")
        if probe is not None:
            probe.record_loss(loss, self.loss_scale)
        scaled = loss.float() * self.loss_scale
        scaled._apex2amp_scaled = True
        scaled.backward(retain_graph=retain_graph)
        if update_master_grads:
            self.update_master_grads()

    def update_master_grads(self):
        inv = 1.0 / self.loss_scale
        grads = []
        for model_p, master in self.pairs:
            if model_p.grad is not None:
                master.grad = model_p.grad.float().mul(inv)
                grads.append(master.grad)
        self.overflow = bool(self.dynamic_loss_scale) and any(not bool(torch.isfinite(g).all()) for g in grads)

    def clip_master_grads(self, max_norm, norm_type=2):
        if self.overflow:
            return -1
        return torch.nn.utils.clip_grad_norm_(self.fp32_params, max_norm, norm_type)

    def step(self, closure=None):
        scale = self.loss_scale
        if self.loss_scaler is not None:
            self.loss_scaler.update_scale(self.overflow)
        skipped = self.overflow
        if not skipped:
            self.optimizer.step()
            for model_p, master in self.pairs:
                model_p.data.copy_(master.data)
        probe = sys.modules.get("_apex2amp_probe")
        if probe is not None:
            probe.managed_step(self.optimizer, skipped, scale=scale)

    def state_dict(self):
        return {"loss_scaler": self.loss_scaler, "dynamic_loss_scale": self.dynamic_loss_scale,
                "overflow": self.overflow, "optimizer_state_dict": self.optimizer.state_dict(),
                "fp32_from_fp16": [m for _, m in self.pairs]}

    def load_state_dict(self, sd):
        self.loss_scaler = sd["loss_scaler"]
        self.dynamic_loss_scale = sd["dynamic_loss_scale"]
        self.overflow = sd["overflow"]
        self.optimizer.load_state_dict(sd["optimizer_state_dict"])
        for (_, master), saved in zip(self.pairs, sd["fp32_from_fp16"]):
            master.data.copy_(saved.data)
