"""`apex2amp convert-checkpoint` (placeholder until its change lands)."""
from __future__ import annotations


class CheckpointError(Exception):
    pass


def convert_checkpoint_file(src: str, dst: str, key=None) -> str:
    raise CheckpointError("not implemented yet")
