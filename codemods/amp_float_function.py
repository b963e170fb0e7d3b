"""apex's `amp.float_function` (a decorator, or `nms = amp.float_function(_C.nms)`) -> a native helper.

apex ran such a function, while amp was active, with its floating-point tensor arguments cast to fp32:
maskrcnn-benchmark marks its CUDA kernels (nms, ROIAlign, ROIPool) so, as they take fp32 only. The
native equivalent is the same cast while autocast is on, with autocast off inside (what
`torch.amp.custom_fwd(cast_inputs=torch.float32)` does for an autograd.Function's forward). The helper
`autocast_float_function` is added to the file; the rule is A2A182 (codemods/amp_handle_rules.py).
`half_function` / `promote_function` and the `register_*` calls stay reported (A2A114).
"""
from __future__ import annotations

FLOAT_HELPER = "autocast_float_function"


def helper_code(device: str) -> str:
    return f'''def autocast_float_function(fn):
    """`fn` run in fp32 while autocast is on: its floating-point tensor arguments cast to fp32, autocast off
    inside (added by apex2amp for apex's `amp.float_function`)."""

    def to_fp32(x):
        if isinstance(x, torch.Tensor):
            return x.float() if x.is_floating_point() else x
        if isinstance(x, (list, tuple)):
            return type(x)(to_fp32(v) for v in x)
        if isinstance(x, dict):
            return {{k: to_fp32(v) for k, v in x.items()}}
        return x

    def run(*args, **kwargs):
        if not torch.is_autocast_enabled("{device}"):
            return fn(*args, **kwargs)
        with torch.autocast("{device}", enabled=False):
            return fn(*to_fp32(args), **to_fp32(kwargs))

    return run
'''
