"""apex availability guards: `has_apex` flags, `amp = None` fallbacks, and folding them away.

After the migration apex is no longer needed, so "apex is available" is simply true: a flag such as
`has_apex`/`APEX_AVAILABLE` (set True next to an apex import in a `try`, False in its `except`) and
`amp is not None` fold to True, `amp is None` to False, and conditions simplify (`fp16 and
has_apex` -> `fp16`).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Set

import libcst as cst

from .names import ImportTable, dotted_name
from .walk import Transformer


def apex_locals(table: ImportTable) -> Set[str]:
    """Local names bound to anything from apex."""
    return set(table.names_under("apex"))


def apex_flags(module: cst.Module, table: ImportTable) -> Set[str]:
    """Names set to True beside an apex import in a `try` body (and usually False in its handler)."""
    return set(apex_flag_tries(module, table))


def apex_flag_tries(module: cst.Module, table: ImportTable) -> Dict[str, List[cst.Try]]:
    """Each apex flag with the `try` statements that set it True beside an apex import (in the `try`
    body, or in its `else:`, which runs when the import worked).

    A `try` that also imports something else (`import apex` beside `from megatron... import
    FusedLayerNorm`) sets no apex flag: its flag also says that the other import worked, and that
    code may need apex in ways this file cannot see."""
    from .index import ModuleIndex
    flags: Dict[str, List[cst.Try]] = {}
    for node in ModuleIndex.of(module).tries:
        body = list(node.body.body) if isinstance(node.body, cst.IndentedBlock) else []
        if node.orelse is not None and isinstance(node.orelse.body, cst.IndentedBlock):
            body += [s for s in node.orelse.body.body if isinstance(s, cst.SimpleStatementLine)
                     and all(isinstance(small, cst.Assign) for small in s.body)]
        imports_apex = imports_other = False
        candidates: Set[str] = set()
        for s in body:
            if isinstance(s, cst.SimpleStatementLine):
                for small in s.body:
                    if isinstance(small, (cst.Import, cst.ImportFrom)):
                        if imports_from_apex(small):
                            imports_apex = True
                        elif not public_torch_import(small):
                            imports_other = True
                    elif isinstance(small, cst.Assign) and isinstance(small.value, cst.Name) and \
                            small.value.value == "True":
                        for t in small.targets:
                            d = dotted_name(t.target)
                            if d and "." not in d:
                                candidates.add(d)
        if imports_apex and not imports_other:
            for flag in candidates:
                flags.setdefault(flag, []).append(node)
    for name in apex_locals(table):
        flags.pop(name, None)
    return flags


def public_torch_import(stmt: cst.CSTNode) -> bool:
    """An import from torch's public modules (`from torch.nn.parallel import DistributedDataParallel as
    ApexDDP`, often what an apex import beside it was rewritten to): it cannot fail where torch runs, so
    a flag set beside it says no more than the apex import does (A2A132). Private modules
    (`torch._six`) come and go between releases and count as other imports."""
    if isinstance(stmt, cst.Import):
        names = [dotted_name(a.name) or "" for a in stmt.names]
    elif isinstance(stmt, cst.ImportFrom) and not stmt.relative and stmt.module is not None:
        names = [dotted_name(stmt.module) or ""]
    else:
        return False
    return bool(names) and all(n.split(".")[0] == "torch" and not any(p.startswith("_") for p in n.split("."))
                               for n in names)


def imported_packages(stmt: cst.CSTNode) -> Set[str]:
    """The top-level packages an Import / ImportFrom statement imports (from); "." for a relative one."""
    if isinstance(stmt, cst.Import):
        return {(dotted_name(a.name) or "").split(".")[0] for a in stmt.names}
    if isinstance(stmt, cst.ImportFrom):
        if stmt.relative or stmt.module is None:
            return {"."}
        return {(dotted_name(stmt.module) or "").split(".")[0]}
    return set()


def imports_from_apex(stmt: cst.CSTNode) -> bool:
    """Whether an Import / ImportFrom statement imports (from) apex."""
    return "apex" in imported_packages(stmt)


def _const(node: cst.BaseExpression) -> Optional[bool]:
    if isinstance(node, cst.Name) and node.value in ("True", "False"):
        return node.value == "True"
    return None


class FoldApexGuards(Transformer):
    """Replace apex flags / `amp is (not) None` by constants and simplify boolean expressions."""

    def __init__(self, flags: Set[str], locals_: Set[str]):
        super().__init__()
        self.flags = flags
        self.locals = locals_
        self.changed = False

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        if updated.value in self.flags:
            self.changed = True
            return cst.Name("True")
        return updated

    def leave_Comparison(self, original: cst.Comparison, updated: cst.Comparison) -> cst.BaseExpression:
        if len(updated.comparisons) == 1 and isinstance(updated.left, cst.Name) and updated.left.value in self.locals:
            ct = updated.comparisons[0]
            if isinstance(ct.comparator, cst.Name) and ct.comparator.value == "None":
                if isinstance(ct.operator, cst.IsNot):
                    self.changed = True
                    return cst.Name("True")
                if isinstance(ct.operator, cst.Is):
                    self.changed = True
                    return cst.Name("False")
        return updated

    def constant(self, node: cst.BaseExpression) -> Optional[bool]:
        """The truth value `node` stands for, if it is a constant this fold may simplify."""
        return _const(node)

    def make_constant(self, value: bool) -> cst.Name:
        return cst.Name("True" if value else "False")

    def keep(self, e: cst.BaseExpression, outer: cst.BaseExpression) -> cst.BaseExpression:
        """`e` in the place of `outer`, which it replaces."""
        return _strip_parens(e, outer)

    def leave_UnaryOperation(self, original: cst.UnaryOperation, updated: cst.UnaryOperation) -> cst.BaseExpression:
        if isinstance(updated.operator, cst.Not):
            c = self.constant(updated.expression)
            if c is not None:
                return self.make_constant(not c)
        return updated

    def leave_BooleanOperation(self, original: cst.BooleanOperation, updated: cst.BooleanOperation
                               ) -> cst.BaseExpression:
        left, right = self.constant(updated.left), self.constant(updated.right)
        if isinstance(updated.operator, cst.And):
            if left is True:
                return self.keep(updated.right, updated)
            if right is True:
                return self.keep(updated.left, updated)
            if left is False or right is False:
                return self.make_constant(False)
        else:
            if left is False:
                return self.keep(updated.right, updated)
            if right is False:
                return self.keep(updated.left, updated)
            if left is True or right is True:
                return self.make_constant(True)
        return updated


def _strip_parens(e: cst.BaseExpression, outer: cst.BaseExpression) -> cst.BaseExpression:
    if outer.lpar:
        return e.with_changes(lpar=outer.lpar, rpar=outer.rpar) if not e.lpar else e
    return e


def fold_condition(expr: cst.BaseExpression, flags: Set[str], locals_: Set[str]) -> cst.BaseExpression:
    """The condition with apex guards folded away (may be the Name True/False)."""
    return expr.visit(FoldApexGuards(flags, locals_))  # type: ignore[return-value]


def is_const(expr: cst.BaseExpression, value: bool) -> bool:
    return _const(expr) is value
