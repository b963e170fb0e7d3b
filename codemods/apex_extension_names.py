"""Names of apex's compiled extension modules, shared by the imports codemod and its TOKENS."""
from __future__ import annotations

# apex's compiled extension modules (csrc/ and contrib/csrc/ of NVIDIA apex), importable only with apex;
# the generic `syncbn` / `bnp` are left out: as bytes they would send many unrelated files to the codemods
APEX_EXTENSIONS = frozenset({
    "amp_C", "apex_C", "fused_layer_norm_cuda", "fused_adam_cuda", "fused_lamb_cuda",
    "fused_dense_cuda", "mlp_cuda", "xentropy_cuda", "fast_layer_norm", "fast_multihead_attn",
    "fused_weight_gradient_mlp_cuda", "scaled_masked_softmax_cuda", "scaled_upper_triang_masked_softmax_cuda",
    "scaled_softmax_cuda", "generic_scaled_masked_softmax_cuda", "fused_rotary_positional_embedding",
    "focal_loss_cuda", "distributed_adam_cuda", "distributed_lamb_cuda", "transducer_joint_cuda",
    "transducer_loss_cuda", "peer_memory_cuda", "nccl_p2p_cuda", "fmhalib", "group_norm_cuda",
})
