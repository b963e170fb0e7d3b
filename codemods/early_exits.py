"""Whether statements can leave their block early (return, continue, break, raise).

The amp codemod puts `scaler.unscale_(opt)` right after the backward only when every path from
there reaches the optimizer step; an early exit in between (the `if not boundary: continue` /
`return` of gradient accumulation) means that placement would unscale on micro-batches that do
not step, which GradScaler refuses on the next one.
"""
from __future__ import annotations

from typing import Iterable

import libcst as cst


class _ExitFinder(cst.CSTVisitor):
    def __init__(self) -> None:
        self.found = False
        self._loops = 0

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False  # a nested function's return leaves that function only

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_For(self, node: cst.For) -> None:
        self._loops += 1

    def leave_For(self, original_node: cst.For) -> None:
        self._loops -= 1

    def visit_While(self, node: cst.While) -> None:
        self._loops += 1

    def leave_While(self, original_node: cst.While) -> None:
        self._loops -= 1

    def visit_Return(self, node: cst.Return) -> None:
        self.found = True

    def visit_Raise(self, node: cst.Raise) -> None:
        self.found = True

    def visit_Continue(self, node: cst.Continue) -> None:
        if not self._loops:
            self.found = True

    def visit_Break(self, node: cst.Break) -> None:
        if not self._loops:
            self.found = True


def may_exit_early(stmts: Iterable[cst.CSTNode]) -> bool:
    """True when any of `stmts` holds a return, raise, or a continue/break of an enclosing loop."""
    for s in stmts:
        finder = _ExitFinder()
        s.visit(finder)
        if finder.found:
            return True
    return False
