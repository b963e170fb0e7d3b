"""The lowest torch a migration target can support (`--target fsdp2` needs a public `fully_shard`)."""
from __future__ import annotations

from typing import Tuple

FSDP2_FLOOR = (2, 6)  # first release with public `torch.distributed.fsdp.fully_shard` / `MixedPrecisionPolicy`


def fsdp2_min_torch(min_torch: Tuple[int, ...], explicit: bool) -> Tuple[int, ...]:
    """The run's --min-torch under the fsdp2 target: the floor when none was given; below it, ValueError
    (a usage error, exit 2)."""
    if not explicit:
        return max(tuple(min_torch), FSDP2_FLOOR)
    if tuple(min_torch) < FSDP2_FLOOR:
        have = ".".join(str(p) for p in min_torch)
        raise ValueError(f"--target fsdp2 needs --min-torch 2.6 or later (torch.distributed.fsdp.fully_shard is "
                         f"public from 2.6), not {have}")
    return min_torch
