"""hand-written loss scaling and FP16_Optimizer patterns -> GradScaler.

Placeholder: the rules of this concern are added by its own change.
"""
from __future__ import annotations

import libcst as cst

from .base import Codemod, FileContext


class ManualLossScalingToGradScaler(Codemod):
    """hand-written loss scaling and FP16_Optimizer patterns -> GradScaler."""

    NAME = "manual_scaling"
    DESCRIPTION = "hand-written loss scaling and FP16_Optimizer patterns -> GradScaler"
    CODES = ()
    PREFILTER = ()

    def transform(self, wrapper: cst.MetadataWrapper, ctx: FileContext) -> cst.Module:
        return wrapper.module
