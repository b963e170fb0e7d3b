"""`import torch` (or another top-level import) added where rewritten code needs it: after the
module's leading imports, or in its place in an isort-sorted import block."""
from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from . import templates

if TYPE_CHECKING:
    from .apex_names import Resolver


def ensure_import(module: cst.Module, stmt_code: str, bound: bool) -> cst.Module:
    """Add a top-level import (e.g. `import torch`) after the module's leading imports unless `bound`."""
    if bound:
        return module
    if stmt_code.startswith("import ") and " as " not in stmt_code:
        from .importing import place_sorted_import
        placed = place_sorted_import(module, stmt_code[len("import "):].strip())
        if placed is not None:  # an isort-sorted import block stays sorted
            return placed
    new_stmt = templates.statement(stmt_code)
    body = list(module.body)
    insert_at = 0
    for i, stmt in enumerate(body):
        if isinstance(stmt, cst.SimpleStatementLine) and all(
                isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body):
            insert_at = i + 1
        elif i == 0 and isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(
                stmt.body[0], cst.Expr) and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString)):
            insert_at = 1
        elif insert_at or not isinstance(stmt, cst.SimpleStatementLine):
            break
    if insert_at < len(body) and insert_at == 0:
        new_stmt = new_stmt.with_changes(leading_lines=body[0].leading_lines)
        body[0] = body[0].with_changes(leading_lines=[])
    body.insert(insert_at, new_stmt)
    return module.with_changes(body=body)


def ensure_torch(module: cst.Module, resolver: Resolver) -> cst.Module:
    """`import torch` where the rewritten code needs it and the module has none."""
    return ensure_import(module, "import torch", resolver.has_torch())
