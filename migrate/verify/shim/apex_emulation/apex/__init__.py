"""Emulation of NVIDIA apex for `apex2amp verify` runs (put on PYTHONPATH by the harness only; never installed).

It reproduces the documented semantics of apex.amp (O0-O3, the dynamic loss scaler, master weights),
apex.parallel, apex.optimizers, apex.normalization and apex.fp16_utils with plain torch, so that legacy
training scripts run where real apex cannot be built.
"""
APEX2AMP_EMULATION = True

from . import amp, fp16_utils, normalization, optimizers, parallel  # noqa: E402,F401
