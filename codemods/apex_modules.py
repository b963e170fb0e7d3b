"""apex.optimizers, apex.normalization, apex.contrib and apex.fp16_utils helpers -> torch equivalents.

Placeholder: the rules of this concern are added by its own change.
"""
from __future__ import annotations

import libcst as cst

from .base import Codemod, FileContext


class ApexModulesToTorch(Codemod):
    """apex.optimizers, apex.normalization, apex.contrib and apex.fp16_utils helpers -> torch equivalents."""

    NAME = "apex_modules"
    DESCRIPTION = "apex.optimizers, apex.normalization, apex.contrib and apex.fp16_utils helpers -> torch equivalents"
    CODES = ()
    PREFILTER = ()

    def transform(self, wrapper: cst.MetadataWrapper, ctx: FileContext) -> cst.Module:
        return wrapper.module
