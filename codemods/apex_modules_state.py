"""The state one file's apex module rewrites share: the resolver, the context, the edit plan,
whether `import torch` is needed, the target torch and the optimizers migrated (for A2A324).

The rewrites (codemods/fused_optimizers.py, fused_norms.py, layer_norm_checks.py, apex_helpers.py)
extend it; codemods/apex_modules.py runs them over the calls and classes that name apex.
"""
from __future__ import annotations

from typing import Callable, List, Optional, Tuple

import libcst as cst

from . import templates
from .apex_names import Resolver
from .base import FileContext
from .edits import EditPlan
from .walk import Visitor


class ModulesRun(Visitor):
    """Walks calls and class bases once, planning rewrites and reporting findings."""

    def __init__(self, res: Resolver, ctx: FileContext):
        self.res = res
        self.ctx = ctx
        self.plan = EditPlan()
        self.needs_torch = False
        self.min_torch = ctx.options.min_torch
        self.migrated_optimizers: List[Tuple[cst.Call, str, str]] = []  # (apex call, apex class, torch class)
        self.legacy_adam = False  # the module uses apex < 0.1 (apex.optimizers.FP16_Optimizer)
        self.needs_lamb = False  # a FusedLAMB call became LAMB's: the class is added (codemods/fused_lamb.py)
        self.lamb_why: Optional[str] = None  # why not ("" once checked and allowed)
        self.parent_of: Callable[[cst.CSTNode], Optional[cst.CSTNode]] = lambda node: None

    # helpers
    def _ok(self, node: cst.CSTNode, code: str) -> bool:
        return self.ctx.enabled(code) and not self.ctx.suppressed(node, code)

    def _callee(self, qualified: str, fallback: str) -> cst.BaseExpression:
        spelled = self.res.spelling(qualified, fallback)
        if spelled.split(".")[0] == "torch":
            self.needs_torch = True
        return templates.expression(spelled)
