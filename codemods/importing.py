"""Adding the imports a rewrite needs (`import torch`, `import os`) where the file keeps its imports.

The placement is libcst's `AddImportsVisitor`'s for a plain `import NAME` (after the docstring or
`__strict__` flag and the leading block of one-import lines, with an empty line before the next
statement), done directly on the module body: the visitor walks and rebuilds the whole module and
importing `libcst.codemod` costs a quarter second per process. `tests/test_importing.py` holds the
two to the same output, except that `import torch.nn` already binds `torch` here (no second import),
and that a leading import block sorted as isort / ruff's `I` rules sort it stays sorted
(`codemods/import_order.py`).
"""
from __future__ import annotations

from typing import Any, Iterable, List, Optional, Tuple

import libcst as cst

from . import templates
from .import_order import sorted_position
from .names import dotted_name


def module_binds_top_level(module: cst.Module, name: str) -> bool:
    """Whether a top-level `import name` or `import name.sub` (no alias; both bind `name`) exists."""
    for stmt in module.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Import):
                    for alias in small.names:
                        dotted = dotted_name(alias.name) or ""
                        if alias.asname is None and (dotted == name or dotted.startswith(name + ".")):
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
    placed = _place_sorted(body, start, at, missing, module.config_for_parsing)
    if placed is not None:
        return module.with_changes(body=placed[0])
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


def place_sorted_import(module: cst.Module, name: str) -> Optional[cst.Module]:
    """`module` with `import name` placed in its sorted leading import block, or None when the
    module has no such block (the caller then places the import its own way)."""
    body: List[cst.BaseStatement] = list(module.body)
    start = 1 if body and _is_docstring_or_strict_flag(body[0]) else 0
    end = start
    while end < len(body) and _is_import_line(body[end]):
        end += 1
    placed = _place_sorted(body, start, end, [name], module.config_for_parsing)
    return module.with_changes(body=placed[0]) if placed is not None else None


def _place_sorted(body: List[cst.BaseStatement], start: int, end: int, names: List[str], config: Any
                  ) -> Optional[Tuple[List[cst.BaseStatement], int, List[str]]]:
    """`body` with each `import NAME` where it keeps a sorted leading import block (body[start:end])
    sorted (isort / ruff `I`), the block's new end, and the names left to place; None when the
    block is not sorted (or empty: then the plain placement is the sorted one too)."""
    if end == start:
        return None
    body = list(body)
    for name in names:
        where = sorted_position(body[start:end], name)
        if where is None:
            return None
        i, blank_before, blank_after = where
        at = start + i
        if i == 0:  # the new first line of the block takes over what precedes the block
            lead = list(body[at].leading_lines)
        else:
            lead = [cst.EmptyLine()] if blank_before else []
        new = cst.parse_statement(f"import {name}", config=config).with_changes(leading_lines=lead)
        if at < end and (i == 0 or blank_after is not None):
            body[at] = body[at].with_changes(leading_lines=[cst.EmptyLine()] if blank_after else [])
        body.insert(at, new)
        end += 1
    if end < len(body) and not body[end].leading_lines and not _is_import_line(body[end]):
        body[end] = body[end].with_changes(leading_lines=(cst.EmptyLine(),))
    return body, end, []


def add_helper_function(module: cst.Module, name: str, code: str) -> cst.Module:
    """Insert the top-level function `code` (named `name`) after the module's imports, once.

    Imports wrapped in `try:` count as imports; the statement that follows the helper keeps its
    comments and gets the two blank lines PEP 8 asks for."""
    for stmt in module.body:
        if isinstance(stmt, cst.FunctionDef) and stmt.name.value == name:
            return module
    helper = templates.statements(code)[0].with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()])
    body = list(module.body)
    last_import = -1
    for i, stmt in enumerate(body):
        if isinstance(stmt, cst.SimpleStatementLine) and any(isinstance(s, (cst.Import, cst.ImportFrom))
                                                             for s in stmt.body):
            last_import = i
        elif isinstance(stmt, cst.Try) and _imports_only(stmt):
            last_import = i
        elif i > last_import + 3 and last_import >= 0:
            break
    at = last_import + 1
    if at < len(body):
        nxt = body[at]
        lead = [ln for ln in nxt.leading_lines if ln.comment is not None]
        body[at] = nxt.with_changes(leading_lines=[cst.EmptyLine(), cst.EmptyLine()] + lead)
    body.insert(at, helper)
    return module.with_changes(body=body)


def _imports_only(stmt: cst.Try) -> bool:
    return all(isinstance(s, cst.SimpleStatementLine) and all(isinstance(x, (cst.Import, cst.ImportFrom))
                                                              for x in s.body)
               for s in stmt.body.body)
