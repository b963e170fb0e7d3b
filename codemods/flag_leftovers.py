"""An apex flag's `try` left holding only torch imports (A2A132).

`try: from apex import amp; from apex.parallel import DistributedDataParallel as ApexDDP; has_apex = True
except ImportError: has_apex = False` loses its apex import, its DDP import becomes torch's and the flag
folds away (codemods/imports.py): what stays is `try: <torch imports> except ImportError: pass`, a guard
around imports that cannot fail where torch runs. It becomes the imports alone.
"""
from __future__ import annotations

from typing import List

import libcst as cst

from .edits import EditPlan, apply_plan
from .guards import public_torch_import
from .index import ModuleIndex
from .names import dotted_name


def _only_torch_imports(body: List[cst.BaseStatement]) -> bool:
    return bool(body) and all(isinstance(s, cst.SimpleStatementLine) and all(
        isinstance(x, (cst.Import, cst.ImportFrom)) and public_torch_import(x) for x in s.body) for s in body)


def _passes(handler: cst.ExceptHandler) -> bool:
    body = handler.body.body if isinstance(handler.body, cst.IndentedBlock) else []
    return bool(body) and all(isinstance(s, cst.SimpleStatementLine) and all(isinstance(x, cst.Pass) for x in s.body)
                              for s in body)


def unwrap_torch_only_tries(module: cst.Module, base: cst.Module) -> cst.Module:
    """Each `try: <public torch imports> except ImportError: pass` of `module` replaced by its imports.
    `base`: the tree `module` was rewritten from (for the index)."""
    plan = EditPlan()
    for t in ModuleIndex.of(module, base=base).tries:
        body = list(t.body.body) if isinstance(t.body, cst.IndentedBlock) else []
        if t.orelse is not None or t.finalbody is not None or len(t.handlers) != 1:
            continue
        h = t.handlers[0]
        if h.type is None or (dotted_name(h.type) or "") not in ("ImportError", "ModuleNotFoundError") or h.name:
            continue
        if _only_torch_imports(body) and _passes(h):
            first = body[0]
            plan.replace_stmt[t] = [first.with_changes(leading_lines=list(t.leading_lines))] + body[1:]
    return apply_plan(module, plan) if plan else module


def torch_import_beside_flag(tries: List[cst.Try]) -> bool:
    """Whether one of these flag `try`s also holds a torch import (then A2A132 says why the flag went)."""
    for t in tries:
        body = t.body.body if isinstance(t.body, cst.IndentedBlock) else []
        if any(isinstance(s, cst.SimpleStatementLine) and any(
                isinstance(x, (cst.Import, cst.ImportFrom)) and public_torch_import(x) for x in s.body) for s in body):
            return True
    return False
