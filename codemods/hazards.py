"""fp16 numerical hazards (findings only).

Placeholder: the rules of this concern are added by its own change.
"""
from __future__ import annotations

import libcst as cst

from .base import Codemod, FileContext


class Fp16HazardLint(Codemod):
    """fp16 numerical hazards (findings only)."""

    NAME = "hazards"
    DESCRIPTION = "fp16 numerical hazards (findings only)"
    CODES = ()
    PREFILTER = ()

    def transform(self, wrapper: cst.MetadataWrapper, ctx: FileContext) -> cst.Module:
        return wrapper.module
