"""The shared state of one file's launch migration: its trees, import table, edit plan and index queries.

Every launch module (the spawn site, the worker rewrite, init_process_group, --local_rank, notes) reads
and plans edits through one `LaunchState`, built once per file by `codemods/launch.py`.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Set

import libcst as cst

from .base import FileContext
from .edits import EditPlan
from .index import ModuleIndex, parent_mapping, positions_of
from .launch_exprs import argparse_options
from .names import ImportTable, literal_string, names_read
from .walk import Visitor


class LaunchState:
    """One file under migration: what every launch step reads, and the edits they plan together."""

    def __init__(self, module: cst.Module, ctx: FileContext):
        self.table = ImportTable.of(module, ctx.module_name)
        self.index = ModuleIndex.of(module)
        self.parents = parent_mapping(module)
        self._under: Optional[Dict[int, List[cst.Call]]] = None
        self._owned: Optional[Dict[int, List[cst.Assign]]] = None
        self.positions = positions_of(module)
        self.module = module
        self.ctx = ctx
        self.plan = EditPlan()
        self.need_os = False
        self.spawn_rewritten = False  # only then may an unused torch.multiprocessing import go
        self.funcs: Dict[str, cst.FunctionDef] = {
            s.name.value: s for s in module.body if isinstance(s, cst.FunctionDef)}
        self.argparse = argparse_options(module)

    def calls_in(self, node: cst.CSTNode) -> List[cst.Call]:
        """Every call in `node`'s subtree (itself included), in tree order, like `iter_calls(node)`;
        from the shared index (one pass over its calls and their ancestors), not a walk of the subtree."""
        if self._under is None:
            under: Dict[int, List[cst.Call]] = {}
            parents = self.index.parents
            for c in self.index.calls:
                under.setdefault(id(c), []).append(c)
                a = parents.get(id(c))
                while a is not None:
                    under.setdefault(id(a), []).append(c)
                    a = parents.get(id(a))
            self._under = under
        return self._under.get(id(node), [])

    def assignments(self, scope: cst.CSTNode) -> List[cst.Assign]:
        """Assign statements inside `scope`, not descending into nested functions or classes (tree
        order); like `module_assignments(scope)` but from the shared index."""
        if not isinstance(scope, (cst.Module, cst.FunctionDef)):
            return module_assignments(scope)
        if self._owned is None:
            parents = self.index.parents
            owned: Dict[int, List[cst.Assign]] = {}
            seen: Set[int] = set()
            for p in parents.values():  # first appearance of each parent is in tree order
                if type(p) is not cst.Assign or id(p) in seen:
                    continue
                seen.add(id(p))
                owner = parents.get(id(p))
                while owner is not None and not isinstance(owner, (cst.FunctionDef, cst.ClassDef)):
                    owner = parents.get(id(owner))
                owned.setdefault(id(owner) if owner is not None else id(self.module), []).append(p)
            self._owned = owned
        return self._owned.get(id(scope), [])

    def line(self, node: cst.CSTNode) -> int:
        pos = self.positions.get(node)
        return pos.start.line if pos is not None else 0

    def reachable(self, fdef: cst.FunctionDef) -> List[cst.FunctionDef]:
        """fdef and the module-level functions it calls, transitively."""
        seen = [fdef]
        i = 0
        while i < len(seen) and len(seen) < 30:
            for c in self.calls_in(seen[i]):
                if isinstance(c.func, cst.Name) and c.func.value in self.funcs:
                    f = self.funcs[c.func.value]
                    if f not in seen:
                        seen.append(f)
            i += 1
        return seen

    def module_function(self, func: cst.BaseExpression) -> Optional[cst.FunctionDef]:
        """The module-level function of this module that a call of `func` (a plain name) runs."""
        if not isinstance(func, cst.Name):
            return None
        for f in self.index.functions:
            if f.name.value == func.value and isinstance(self.index.parent(f), cst.Module):
                return f
        return None


    def master_target(self, stmt: cst.Assign) -> Optional[str]:
        if len(stmt.targets) != 1:
            return None
        t = stmt.targets[0].target
        if isinstance(t, cst.Subscript) and self.table.refers_to(t.value, "os.environ") and len(t.slice) == 1:
            el = t.slice[0].slice
            if isinstance(el, cst.Index):
                s = literal_string(el.value)
                if s in ("MASTER_ADDR", "MASTER_PORT"):
                    return s
        return None

    def last_assignment_in_block(self, line: cst.SimpleStatementLine, name: str) -> Optional[cst.Assign]:
        """`name = ...` earlier in the same block as `line`, with no read of `name` in between."""
        block = self.parents.get(line)
        body = list(getattr(block, "body", []))
        if line not in body:
            return None
        idx = body.index(line)
        for stmt in reversed(body[:idx]):
            if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign):
                a = stmt.body[0]
                if len(a.targets) == 1 and isinstance(a.targets[0].target, cst.Name) and a.targets[0].target.value == name:
                    return a
            if name in names_read(stmt):
                return None
        return None


def module_assignments(scope: cst.CSTNode) -> List[cst.Assign]:
    """Assign statements inside `scope`, not descending into nested functions or classes."""
    out: List[cst.Assign] = []

    class V(Visitor):
        def visit_FunctionDef(self, n: cst.FunctionDef) -> bool:
            return n is scope

        def visit_ClassDef(self, n: cst.ClassDef) -> bool:
            return False

        def visit_Assign(self, n: cst.Assign) -> None:
            out.append(n)

    scope.visit(V())
    return out
