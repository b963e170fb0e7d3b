"""Adding the imports a rewrite needs (`import torch`, `import os`) where the file keeps its imports.

The placement is libcst's `AddImportsVisitor`'s for a plain `import NAME` (after the docstring or
`__strict__` flag and the leading block of one-import lines, with an empty line before the next
statement), done directly on the module body: the visitor walks and rebuilds the whole module and
importing `libcst.codemod` costs a quarter second per process. `tests/test_importing.py` holds the
two to the same output.
"""
from __future__ import annotations

from typing import Iterable, List

import libcst as cst

from .names import dotted_name


def module_binds_top_level(module: cst.Module, name: str) -> bool:
    """Whether a top-level `import name` (no alias) exists."""
    for stmt in module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Import):
                    for alias in small.names:
                        if alias.asname is None and dotted_name(alias.name) == name:
                            return True
    return False


def _is_docstring_or_strict_flag(stmt: cst.CSTNode) -> bool:
    if not isinstance(stmt, cst.SimpleStatementLine) or not stmt.body:
        return False
    first = stmt.body[0]
    if len(stmt.body) == 1 and isinstance(first, cst.Expr) and isinstance(first.value, cst.SimpleString):
        return True
    return isinstance(first, cst.Assign) and len(first.targets) == 1 \
        and isinstance(first.targets[0].target, cst.Name) and first.targets[0].target.value == "__strict__"


def _is_import_line(stmt: cst.CSTNode) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 \
        and isinstance(stmt.body[0], (cst.Import, cst.ImportFrom))


def ensure_imports(module: cst.Module, names: Iterable[str]) -> cst.Module:
    """Add `import NAME` for each name the module does not import at top level yet."""
    missing = sorted({n for n in names if not module_binds_top_level(module, n)})
    if not missing:
        return module
    body: List[cst.BaseStatement] = list(module.body)
    start = 1 if body and _is_docstring_or_strict_flag(body[0]) else 0
    at = start
    while at < len(body) and _is_import_line(body[at]):
        at += 1
    after = body[at:]
    if after:
        first = after[0]
        if not first.leading_lines:
            after[0] = first.with_changes(leading_lines=(cst.EmptyLine(),))
        elif first.leading_lines[0].comment is not None:
            after[0] = first.with_changes(leading_lines=(cst.EmptyLine(), *first.leading_lines))
    config = module.config_for_parsing
    added = [cst.parse_statement(f"import {n}", config=config) for n in missing]
    return module.with_changes(body=(*body[:at], *added, *after))
