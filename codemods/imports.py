"""apex imports the migration left unused, with their guards.

Placeholder: the rules of this concern are added by its own change.
"""
from __future__ import annotations

import libcst as cst

from .base import Codemod, FileContext


class RemoveApexImports(Codemod):
    """apex imports the migration left unused, with their guards."""

    NAME = "imports"
    DESCRIPTION = "apex imports the migration left unused, with their guards"
    CODES = ()
    PREFILTER = ()

    def transform(self, wrapper: cst.MetadataWrapper, ctx: FileContext) -> cst.Module:
        return wrapper.module
