"""The A2A108 message for an apex O2/O3 `amp.initialize`: what the model's weights become, by target.

The default target keeps fp32 weights under autocast (GradScaler refuses fp16 gradients). Under
`--target fsdp2` the sharded model computes with the MixedPrecisionPolicy's `param_dtype` parameters and
keeps fp32 sharded master parameters (apex O2's memory recipe), unless the fsdp2 target leaves the file
unsharded, which an A2A8xx finding then says.
"""
from __future__ import annotations


def opt_level_message(level: str, target: str) -> str:
    """The A2A108 finding's text for opt level `level` ("O2"/"O3") under migration target `target`."""
    if target == "fsdp2":
        o3 = "; O3's pure fp16 has no equivalent: the masters stay fp32" if level == "O3" else ""
        return (f"opt_level {level}: under --target fsdp2 the sharded model computes with MixedPrecisionPolicy "
                f"`param_dtype` parameters, with fp32 sharded master parameters and fp32 gradient reduction "
                f"(apex O2's memory recipe){o3}; where the target leaves the file unsharded (an A2A8xx finding "
                f"says why), the model stays fp32 under autocast; numerics change")
    return (f"opt_level {level}: the model stays fp32 and runs under autocast "
            f"(GradScaler refuses fp16 gradients); numerics and memory change")
