"""Adding the imports a rewrite needs (`import torch`, `import os`) where the file keeps its imports."""
from __future__ import annotations

from typing import Iterable

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor


def module_binds_top_level(module: cst.Module, name: str) -> bool:
    """Whether a top-level `import name` (no alias) exists."""
    for stmt in module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Import):
                    for alias in small.names:
                        if alias.asname is None and cst.Module([]).code_for_node(alias.name) == name:
                            return True
    return False


def ensure_imports(module: cst.Module, names: Iterable[str]) -> cst.Module:
    """Add `import NAME` for each name the module does not import at top level yet."""
    missing = [n for n in names if not module_binds_top_level(module, n)]
    if not missing:
        return module
    ctx = CodemodContext()
    for n in missing:
        AddImportsVisitor.add_needed_import(ctx, n)
    return AddImportsVisitor(ctx).transform_module(module)
