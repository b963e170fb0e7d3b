"""Verify's view of an `--target fsdp2` migration: how the original is launched, which tolerance holds.

An original that already runs under torchrun (it reads LOCAL_RANK, no mp.spawn) is launched under torchrun
too when the migrated side is; a migrated side that calls `fully_shard` is compared with the fidelity
tolerance (FSDP2 computes with low-precision parameters, where the original kept fp32 weights or apex's
fp16 copies: not the same engine).
"""
from __future__ import annotations

from .runner import reads_torchrun_env, uses_spawn


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def original_launcher(original_entry: str, migrated_launcher: str) -> str:
    """'torchrun' for an original written for torchrun when the migrated side runs under it; else 'python'."""
    src = _read(original_entry)
    if migrated_launcher == "torchrun" and "LOCAL_RANK" in src and reads_torchrun_env(src) and not uses_spawn(src):
        return "torchrun"
    return "python"


def shards_with_fsdp2(migrated_entry: str) -> bool:
    """The migrated program shards its model with FSDP2's `fully_shard`."""
    return "fully_shard(" in _read(migrated_entry)
