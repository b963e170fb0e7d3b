"""Emulated apex.normalization.fused_layer_norm: the module apex's norms live in (BERT-era code imports
FusedLayerNorm from here)."""
from apex.normalization import *  # noqa: F401,F403
