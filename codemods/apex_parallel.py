"""apex.parallel DistributedDataParallel / SyncBatchNorm -> torch.nn.parallel / torch.nn.SyncBatchNorm.

Placeholder: the rules of this concern are added by its own change.
"""
from __future__ import annotations

import libcst as cst

from .base import Codemod, FileContext


class ApexParallelToTorchDDP(Codemod):
    """apex.parallel DistributedDataParallel / SyncBatchNorm -> torch.nn.parallel / torch.nn.SyncBatchNorm."""

    NAME = "apex_parallel"
    DESCRIPTION = "apex.parallel DistributedDataParallel / SyncBatchNorm -> torch.nn.parallel / torch.nn.SyncBatchNorm"
    CODES = ()
    PREFILTER = ()

    def transform(self, wrapper: cst.MetadataWrapper, ctx: FileContext) -> cst.Module:
        return wrapper.module
