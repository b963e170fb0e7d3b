"""Emulated apex.normalization: FusedLayerNorm/FusedRMSNorm (and Mixed*) by torch's norms."""
import torch


class FusedLayerNorm(torch.nn.LayerNorm):
    """apex FusedLayerNorm by nn.LayerNorm (same parameter names)."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, memory_efficient=False):
        super().__init__(normalized_shape, eps=eps, elementwise_affine=elementwise_affine)


class FusedRMSNorm(torch.nn.Module):
    """apex FusedRMSNorm: x / sqrt(mean(x^2) + eps) * weight, eps 1e-5."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, memory_efficient=False):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self.weight = torch.nn.Parameter(torch.ones(self.normalized_shape)) if elementwise_affine else None

    def forward(self, x):
        return torch.nn.functional.rms_norm(x, self.normalized_shape, self.weight, self.eps)


class MixedFusedLayerNorm(FusedLayerNorm):
    def __init__(self, normalized_shape, eps=1e-5, **kwargs):
        super().__init__(normalized_shape, eps=eps)


class MixedFusedRMSNorm(FusedRMSNorm):
    def __init__(self, normalized_shape, eps=1e-5, **kwargs):
        super().__init__(normalized_shape, eps=eps)


def fused_layer_norm_affine(input, weight, bias, normalized_shape, eps=1e-6, memory_efficient=False):
    return torch.nn.functional.layer_norm(input, normalized_shape, weight, bias, eps)


def fused_rms_norm_affine(input, weight, normalized_shape, eps=1e-6, memory_efficient=False):
    return torch.nn.functional.rms_norm(input, normalized_shape, weight, eps)
