"""apex.amp (initialize, scale_loss, steps, master_params, state dicts) -> torch.amp autocast + GradScaler.

Placeholder: the rules of this concern are added by its own change.
"""
from __future__ import annotations

import libcst as cst

from .base import Codemod, FileContext


class ApexAmpToTorchAmp(Codemod):
    """apex.amp (initialize, scale_loss, steps, master_params, state dicts) -> torch.amp autocast + GradScaler."""

    NAME = "amp"
    DESCRIPTION = "apex.amp (initialize, scale_loss, steps, master_params, state dicts) -> torch.amp autocast + GradScaler"
    CODES = ()
    PREFILTER = ()

    def transform(self, wrapper: cst.MetadataWrapper, ctx: FileContext) -> cst.Module:
        return wrapper.module
