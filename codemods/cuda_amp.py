"""deprecated torch.cuda.amp names -> torch.amp.

Placeholder: the rules of this concern are added by its own change.
"""
from __future__ import annotations

import libcst as cst

from .base import Codemod, FileContext


class DeprecatedCudaAmpToTorchAmp(Codemod):
    """deprecated torch.cuda.amp names -> torch.amp."""

    NAME = "cuda_amp"
    DESCRIPTION = "deprecated torch.cuda.amp names -> torch.amp"
    CODES = ()
    PREFILTER = ()

    def transform(self, wrapper: cst.MetadataWrapper, ctx: FileContext) -> cst.Module:
        return wrapper.module
