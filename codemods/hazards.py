"""fp16 numerical hazards in (migrated) mixed-precision code: findings only, never a rewrite.

Runs last, on the migrated text, and only on files that use mixed precision at all (autocast,
GradScaler, apex, `.half()`), so clean fp32 repositories stay quiet. Each rule is tuned for
precision (see docs verification-notes section 5, rules L1-L12): it fires on shapes that overflow,
raise or silently produce inf/NaN in fp16, not on every large number.

The checks live with their rules: constants fp16 cannot hold (codemods/hazard_constants.py), code
autocast breaks (codemods/hazard_autocast.py), the scaled loss (codemods/hazard_scaled_loss.py);
which files are read is decided from the tokens (codemods/hazard_text.py).
"""
from __future__ import annotations

from typing import List, Optional

import libcst as cst

from .base import Codemod, FileContext
from .hazard_autocast import AutocastChecks
from .hazard_constants import ConstantChecks
from .hazard_half_outside import CODE as _OUTSIDE  # noqa: F401  (registers A2A607, run by migrate/half_outside.py)
from .hazard_scaled_loss import ScaledLossChecks
from .hazard_text import FileText
from .index import ModuleIndex
from .names import dotted_name


class Fp16HazardLint(Codemod):
    """fp16 numerical hazards (findings only)."""

    NAME = "hazards"
    DESCRIPTION = "fp16 numerical hazards (findings only)"
    CODES = ("A2A601", "A2A602", "A2A603", "A2A604", "A2A605", "A2A606")
    TOKENS = (b"autocast", b"GradScaler", b".half()", b"float16", b"scale_loss")  # MIXED_PRECISION's
    WORDS = (b"apex",)
    REPORTS_ONLY = True

    def transform(self, wrapper: cst.MetadataWrapper, ctx: FileContext) -> cst.Module:
        module = wrapper.module
        index = ModuleIndex.of(module)
        text = FileText.of(module)
        if not text.mixed_precision():
            return module
        lint = _Lint(ctx, wrapper, autocast_file=text.autocast_or_scaler(), fp16_file=text)
        _replay(index, text.order, lint)
        lint.finish()
        return module


def _replay(index: ModuleIndex, order: List[cst.CSTNode], lint: "_Lint") -> None:
    """Drive `lint` as `module.visit(lint)` would, from the shared index instead of a tree walk.

    The open functions and `with` blocks are kept on a stack and left once a later node lies outside them.
    """
    stack: List[cst.CSTNode] = []
    for node in order:
        kind = type(node)
        while stack and not index.contains(stack[-1], node):
            _leave(lint, stack.pop())
        if kind is cst.Call:
            lint.visit_Call(node)  # type: ignore[arg-type]
        elif kind is cst.BinaryOperation:
            lint.visit_BinaryOperation(node)  # type: ignore[arg-type]
        elif kind is cst.Assign:
            lint.visit_Assign(node)  # type: ignore[arg-type]
        elif kind is cst.With:
            lint.visit_With(node)  # type: ignore[arg-type]
            stack.append(node)
        else:
            lint.visit_FunctionDef(node)  # type: ignore[arg-type]
            stack.append(node)
    while stack:
        _leave(lint, stack.pop())


def _leave(lint: "_Lint", node: cst.CSTNode) -> None:
    if isinstance(node, cst.With):
        lint.leave_With(node)
    else:
        lint.leave_FunctionDef(node)  # type: ignore[arg-type]


class _Lint(ConstantChecks, AutocastChecks, ScaledLossChecks):
    """Walks one file once, keeping the scopes and autocast regions, and runs every check."""

    # scopes --------------------------------------------------------------------------------
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.functions.append([])
        self.scaled_names.append(set())

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._check_clip_order(self.functions.pop())
        self.scaled_names.pop()

    def finish(self) -> None:
        self._check_clip_order(self.functions[0])

    def visit_With(self, node: cst.With) -> None:
        state: Optional[bool] = None
        for item in node.items:
            call = item.item
            if isinstance(call, cst.Call) and (dotted_name(call.func) or "").endswith("autocast"):
                enabled = True
                for a in call.args:
                    if a.keyword is not None and a.keyword.value == "enabled" and isinstance(a.value, cst.Name) \
                            and a.value.value == "False":
                        enabled = False
                state = enabled
            if item.asname is not None and isinstance(call, cst.Call):
                f = dotted_name(call.func) or ""
                if f.endswith("scale_loss"):
                    n = dotted_name(item.asname.name)  # type: ignore[arg-type]
                    if n:
                        self.scaled_names[-1].add(n)
        self.autocast_depth.append(state if state is not None else (self.autocast_depth[-1]
                                                                    if self.autocast_depth else False))

    def leave_With(self, node: cst.With) -> None:
        self.autocast_depth.pop()

    # assignments of scaled values ----------------------------------------------------------
    def visit_Assign(self, node: cst.Assign) -> None:
        self._track_scaled(node)
        self._subscript_constant(node)

    # calls ---------------------------------------------------------------------------------
    def visit_Call(self, node: cst.Call) -> None:
        func = dotted_name(node.func) or ""
        last = func.rsplit(".", 1)[-1] if func else (
            node.func.attr.value if isinstance(node.func, cst.Attribute) else "")
        self._mask_fill(node, last)
        self._bce(node, func, last)
        self._fp16_cast(node, last)
        self._nonfinite(node, last)
        self._eps_call(node, last)
        self._clip_events(node, last)
