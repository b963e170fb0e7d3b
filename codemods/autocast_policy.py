"""Which functions CUDA autocast already runs in fp16, in fp32 or at the widest input type.

apex's `amp.register_half_function(torch, "einsum")` (and `register_float_function`,
`register_promote_function`) added a function to O1's cast lists. Where autocast's own list already
holds that function with the same cast, the registration has nothing left to do after the migration and
is removed (A2A183); any other registration stays reported (A2A114). The lists are CUDA autocast's
(ATen's `AT_FORALL_LOWER_PRECISION_FP`, `AT_FORALL_FP32`, `AT_FORALL_FP32_SET_OPT_DTYPE`,
`AT_FORALL_PROMOTE`, unchanged since torch 1.10 except for additions), limited to the names that are
public functions of `torch` and `torch.nn.functional`.
"""
from __future__ import annotations

from typing import Dict, FrozenSet

_HALF_TORCH = frozenset("""
    conv1d conv2d conv3d conv_tbc conv_transpose1d conv_transpose2d conv_transpose3d prelu addmm addmv addr
    matmul einsum mm mv addbmm baddbmm bmm chain_matmul
""".split())
_HALF_FUNCTIONAL = frozenset("conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d prelu "
                             "linear".split())
_FLOAT_TORCH = frozenset("""
    acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan pow layer_norm group_norm
    cosine_similarity dist pdist cdist renorm logsumexp softmax log_softmax cumprod cumsum prod sum
""".split())
_FLOAT_FUNCTIONAL = frozenset("""
    softplus layer_norm group_norm cosine_similarity poisson_nll_loss cosine_embedding_loss nll_loss
    hinge_embedding_loss kl_div l1_loss smooth_l1_loss huber_loss mse_loss margin_ranking_loss
    multilabel_margin_loss soft_margin_loss triplet_margin_loss multi_margin_loss
    binary_cross_entropy_with_logits pdist softmax log_softmax softmin
""".split())
_PROMOTE_TORCH = frozenset("addcdiv addcmul atan2 bilinear cross dot grid_sampler index_put scatter_add "
                           "tensordot".split())
_PROMOTE_FUNCTIONAL = frozenset(["bilinear"])

COVERED: Dict[str, Dict[str, FrozenSet[str]]] = {
    "register_half_function": {"torch": _HALF_TORCH, "torch.nn.functional": _HALF_FUNCTIONAL},
    "register_float_function": {"torch": _FLOAT_TORCH, "torch.nn.functional": _FLOAT_FUNCTIONAL},
    "register_promote_function": {"torch": _PROMOTE_TORCH, "torch.nn.functional": _PROMOTE_FUNCTIONAL},
}
CAST = {"register_half_function": "fp16", "register_float_function": "fp32",
        "register_promote_function": "the widest input type"}


def autocast_covers(registration: str, module: str, name: str) -> bool:
    """Whether CUDA autocast already gives `module.name` the cast `amp.<registration>` asked for."""
    return name in COVERED.get(registration, {}).get(module, frozenset())
