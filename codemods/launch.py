"""mp.spawn and torch.distributed.launch entry points -> torchrun environment.

Placeholder: the rules of this concern are added by its own change.
"""
from __future__ import annotations

import libcst as cst

from .base import Codemod, FileContext


class SpawnToTorchrun(Codemod):
    """mp.spawn and torch.distributed.launch entry points -> torchrun environment."""

    NAME = "launch"
    DESCRIPTION = "mp.spawn and torch.distributed.launch entry points -> torchrun environment"
    CODES = ()
    PREFILTER = ()

    def transform(self, wrapper: cst.MetadataWrapper, ctx: FileContext) -> cst.Module:
        return wrapper.module
