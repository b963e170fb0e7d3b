"""Unsafe fixes, in ruff's sense: a rewrite that is right in intent but changes what the program computes.

A codemod that can migrate a site only by changing its numerics (a clip moved to the accumulation boundary)
calls `offer(ctx, node, code, change)`. By default the fix is not applied: the site is left as it is and the
finding says what the fix would change and "unsafe fix available: --unsafe-fixes". With `--unsafe-fixes`
(or `unsafe-fixes = true` in `[tool.apex2amp]`) the fix is applied and reported as fixed, with the same
description of what changes, so a reviewer knows to `verify` the pair with the fidelity tolerance.
"""
from __future__ import annotations

from typing import Optional

import libcst as cst

from .base import FileContext

AVAILABLE = "unsafe fix available: --unsafe-fixes"
APPLIED = "unsafe fix applied (--unsafe-fixes)"


def enabled(ctx: FileContext) -> bool:
    """Whether this run applies unsafe fixes."""
    return bool(getattr(ctx.options, "unsafe_fixes", False))


def offer(ctx: FileContext, node: Optional[cst.CSTNode], code: str, change: str) -> bool:
    """Report the unsafe fix `code` at `node`; True when the caller should apply it.

    `change` says exactly what the fix changes numerically; it is part of the finding either way.
    """
    if enabled(ctx):
        ctx.report(node, code, f"{change} [{APPLIED}]", fixed=True)
        return True
    ctx.report(node, code, f"{change} [{AVAILABLE}]")
    return False
