"""Remove apex imports the migration left unused, with their guards (A2A110, A2A118, A2A123).

Runs after every rewriting codemod. An apex name that is no longer referenced loses its import; a
`try/except ImportError` around it goes when emptied (with the `amp = None` / `has_apex = False`
fallbacks); asserts and `if not has_apex: raise ...` checks that only guard apex go; flags in other
conditions fold to True (`args.fp16 and has_apex` -> `args.fp16`). Names still used keep their
import and get a finding.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Set, Tuple

import libcst as cst

from . import amp_rules as R
from .base import Codemod, FileContext
from .edits import EditPlan, apply_plan
from .index import ModuleIndex
from .guards import FoldApexGuards, apex_flags, apex_locals, is_const
from .names import ImportTable, dotted_name, import_bound_names, names_read

FP16_UTILS_EXPORTS = {
    "FP16_Optimizer", "FP16Model", "network_to_half", "tofp16", "BN_convert_float", "prep_param_lists",
    "model_grads_to_master_grads", "master_params_to_model_params", "to_python_float", "clip_grad_norm",
    "convert_module", "convert_network", "DynamicLossScaler", "LossScaler",
}


def _is_guard_stmt(stmt: cst.CSTNode, guard_names: Set[str]) -> bool:
    """An assert or `if <apex check>: raise/print/warn` that exists only to check apex is installed."""
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assert):
        return bool(names_read(stmt.body[0].test)) and names_read(stmt.body[0].test) <= guard_names | {"None"}
    if isinstance(stmt, cst.If) and stmt.orelse is None:
        test_names = names_read(stmt.test)
        if not test_names or not test_names <= guard_names | {"None"}:
            return False
        body = stmt.body.body if isinstance(stmt.body, cst.IndentedBlock) else []
        for s in body:
            if not isinstance(s, cst.SimpleStatementLine):
                return False
            for small in s.body:
                if isinstance(small, cst.Raise):
                    continue
                if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
                    d = dotted_name(small.value.func) or ""
                    if d.split(".")[-1] in ("print", "warn", "warning", "error", "exit"):
                        continue
                return False
        return True
    return False


class RemoveApexImports(Codemod):
    """Drop apex imports that nothing uses any more, and the guards around them."""

    NAME = "imports"
    DESCRIPTION = "apex imports the migration left unused, with their guards"
    CODES = ("A2A110", "A2A118", "A2A123")
    PREFILTER = (b"apex",)

    def transform(self, wrapper: cst.MetadataWrapper, ctx: FileContext) -> cst.Module:
        module = wrapper.module
        table = ImportTable.of(module, ctx.module_name)
        locals_ = apex_locals(table)
        star = {m: nodes for m, nodes in table.star_modules.items() if m == "apex" or m.startswith("apex.")}
        if not locals_ and not star:
            return _unwrap_install_guards(module, ctx)
        flags = apex_flags(module, table)
        guard_names = locals_ | flags
        plan = EditPlan()
        uses, guard_stmts, fallback_assigns, guard_comparisons = _apex_uses(module, guard_names, locals_)
        # flags and `amp is None` checks inside other expressions fold to constants
        removable = {name for name in locals_ if not uses.get(name)}
        kept = locals_ - removable
        if kept:
            # something from apex is still used: leave guards and flags alone
            for name in sorted(kept):
                for stmt in table.statements.get(name, [])[:1]:
                    ctx.report(stmt, R.LEFTOVER.code, f"apex name `{name}` is still used ({len(uses[name])} use(s)); "
                                                      "its import stays until those are migrated")
                seen_lines: Set[int] = set()
                for use in uses[name]:
                    line = ctx.line_of(use)
                    if line in seen_lines:
                        continue
                    seen_lines.add(line)
                    ctx.report(use, R.LEFTOVER.code, f"apex `{name}` still used here: migrate this use by hand "
                                                     "(see `apex2amp explain` of the other findings on this line)")
            # imports of names nothing uses any more still go, unless they sit in a guard (try/except)
            index = ModuleIndex.of(module)
            done: Set[int] = set()
            for name in sorted(removable):
                for stmt in table.statements.get(name, []):
                    if id(stmt) in done or any(isinstance(a, cst.Try) for a in index.ancestors(stmt)):
                        continue
                    done.add(id(stmt))
                    bound = import_bound_names(stmt)
                    if not bound <= removable:
                        new = _without_names(stmt, removable)
                        if new is not None:
                            plan.replace_node[stmt] = new
                    else:
                        plan.remove(stmt)
                    ctx.report(stmt, R.APEX_IMPORT.code, "unused apex import removed", fixed=True)
            self._star_findings(star, uses, ctx, plan)
            return apply_plan(module, plan) if plan else module
        # every apex name is unused: remove imports, fallbacks, guards; fold flags elsewhere
        reported: Set[int] = set()
        for name in removable:
            for stmt in table.statements.get(name, []):
                if id(stmt) in reported:
                    continue
                reported.add(id(stmt))
                new = _without_names(stmt, removable)
                if new is None:
                    plan.remove(stmt)
                else:
                    plan.replace_node[stmt] = new
                ctx.report(stmt, R.APEX_IMPORT.code, "unused apex import removed", fixed=True)
        for s in fallback_assigns + guard_stmts:
            plan.remove(s)
        self._star_findings(star, uses, ctx, plan)
        new_module = apply_plan(module, plan) if plan else module
        if plan and ModuleIndex.of(new_module).code.startswith(("\n", "\r\n")) \
                and not ModuleIndex.of(module).code.startswith(("\n", "\r\n")):
            new_module = _strip_leading_blank_lines(new_module)
        if guard_comparisons or any(uses.get(f) for f in flags):
            new_module = new_module.visit(_FoldStatements(FoldApexGuards(flags, locals_)))
        if not _install_guard_candidates(module):
            return new_module
        return _unwrap_install_guards(new_module, ctx, report=False)

    def _star_findings(self, star, uses, ctx: FileContext, plan: EditPlan) -> None:
        for mod, nodes in star.items():
            exported = FP16_UTILS_EXPORTS if mod.startswith("apex.fp16_utils") else None
            used = sorted(n for n in (exported or set()) if uses.get(n))
            for node in nodes:
                if exported is not None and not used:
                    plan.remove(node)
                    ctx.report(node, R.APEX_IMPORT.code, f"unused `from {mod} import *` removed", fixed=True)
                else:
                    what = ", ".join(used) if used else "names"
                    ctx.report(node, R.STAR_IMPORT.code, f"`from {mod} import *` still provides {what}: migrate "
                                                         "them, then remove the import")


def _apex_uses(module: cst.Module, guard_names: Set[str], locals_: Set[str]
               ) -> Tuple[Dict[str, List[cst.Name]], List[cst.CSTNode], List[cst.CSTNode], List[cst.CSTNode]]:
    """Where the module still reads names, outside imports and apex guards, in source order.

    Returns (uses by name, guard statements, `amp = None`-style fallback assignments, `amp is
    (not) None` comparisons); the last three and the imports are not searched for uses. Attribute
    names, keyword names of arguments are not uses.
    """
    uses: Dict[str, List[cst.Name]] = {}
    guard_stmts: List[cst.CSTNode] = []
    fallback_assigns: List[cst.CSTNode] = []
    guard_comparisons: List[cst.CSTNode] = []

    def visit(node: cst.CSTNode) -> Sequence[Optional[cst.CSTNode]]:
        t = type(node)
        if t is cst.Name:
            uses.setdefault(node.value, []).append(node)  # type: ignore[attr-defined,arg-type]
        elif t is cst.Attribute:
            return (node.attr,)  # type: ignore[attr-defined]
        elif t is cst.Arg:
            return (node.keyword,)  # type: ignore[attr-defined]
        elif t is cst.Import or t is cst.ImportFrom:
            return (node,)
        elif (t is cst.SimpleStatementLine or t is cst.If) and _is_guard_stmt(node, guard_names):
            guard_stmts.append(node)
            return (node,)
        elif t is cst.SimpleStatementLine and len(node.body) == 1 and \
                isinstance(node.body[0], cst.Assign):  # type: ignore[attr-defined]
            a = node.body[0]  # type: ignore[attr-defined]
            tnames = {dotted_name(t.target) for t in a.targets}
            if tnames <= guard_names and isinstance(a.value, cst.Name) and \
                    a.value.value in ("None", "True", "False"):
                fallback_assigns.append(node)
                return (node,)
        elif t is cst.Comparison:
            # `amp is None` / `amp is not None` fold to constants once apex is gone
            n = node
            if isinstance(n.left, cst.Name) and n.left.value in locals_ and len(n.comparisons) == 1 and \
                    isinstance(n.comparisons[0].operator, (cst.Is, cst.IsNot)) and \
                    isinstance(n.comparisons[0].comparator, cst.Name) and \
                    n.comparisons[0].comparator.value == "None":  # type: ignore[attr-defined]
                guard_comparisons.append(n)
                return (node,)
        return ()

    ModuleIndex.of(module).walk_pruned(visit)
    return uses, guard_stmts, fallback_assigns, guard_comparisons


def _without_names(stmt: cst.CSTNode, names: Set[str]) -> Optional[cst.CSTNode]:
    """The import statement minus the aliases binding `names` (None when nothing is left)."""
    if isinstance(stmt, cst.Import):
        keep = [a for a in stmt.names if (a.asname.name.value if a.asname else dotted_name(a.name).split(".")[0])  # type: ignore[union-attr]
                not in names]
    elif isinstance(stmt, cst.ImportFrom) and not isinstance(stmt.names, cst.ImportStar):
        keep = [a for a in stmt.names if (a.asname.name.value if a.asname else dotted_name(a.name))  # type: ignore[union-attr]
                not in names]
    else:
        return None
    if not keep:
        return None
    keep[-1] = keep[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    if isinstance(stmt, cst.ImportFrom) and stmt.rpar is None:
        return stmt.with_changes(names=keep)
    return stmt.with_changes(names=keep)


class _FoldStatements(cst.CSTTransformer):
    """Fold apex flags in conditions; drop `if False:` branches and unwrap `if True:`."""

    def __init__(self, folder: FoldApexGuards):
        super().__init__()
        self.folder = folder
        self._elifs: Set[int] = set()  # ids of the If nodes that are another If's `elif`

    def visit_If(self, node: cst.If) -> None:
        if isinstance(node.orelse, cst.If):
            self._elifs.add(id(node.orelse))

    def leave_If(self, original: cst.If, updated: cst.If):
        test = updated.test.visit(self.folder)
        if id(original) in self._elifs:
            return self._fold_elif(updated, test)
        if is_const(test, True):
            body = updated.body
            return cst.FlattenSentinel(list(body.body)) if isinstance(body, cst.IndentedBlock) else updated
        if is_const(test, False):
            if isinstance(updated.orelse, cst.Else) and isinstance(updated.orelse.body, cst.IndentedBlock):
                return cst.FlattenSentinel(list(updated.orelse.body.body))
            if isinstance(updated.orelse, cst.If):
                return updated.orelse
            return cst.RemovalSentinel.REMOVE
        return updated.with_changes(test=test)

    @staticmethod
    def _fold_elif(updated: cst.If, test: cst.BaseExpression):
        """An `elif` stands in its parent's `orelse`, which takes an If, an Else or nothing: a true
        test makes its body the `else:`, a false one hands the place to what follows it."""
        if is_const(test, True):
            return cst.Else(body=updated.body, leading_lines=updated.leading_lines,
                            whitespace_before_colon=updated.whitespace_after_test)
        if is_const(test, False):
            return updated.orelse if updated.orelse is not None else cst.RemovalSentinel.REMOVE
        return updated.with_changes(test=test)

    def leave_Assert(self, original: cst.Assert, updated: cst.Assert):
        test = updated.test.visit(self.folder)
        if is_const(test, True):
            return cst.RemovalSentinel.REMOVE
        return updated.with_changes(test=test)

    def leave_While(self, original: cst.While, updated: cst.While):
        return updated.with_changes(test=updated.test.visit(self.folder))

    def leave_Arg(self, original: cst.Arg, updated: cst.Arg):
        return updated.with_changes(value=updated.value.visit(self.folder))

    def leave_Assign(self, original: cst.Assign, updated: cst.Assign):
        return updated.with_changes(value=updated.value.visit(self.folder))


def _mentions_apex(node: cst.CSTNode) -> bool:
    found = False

    class V(cst.CSTVisitor):
        def visit_SimpleString(self, n: cst.SimpleString) -> None:
            nonlocal found
            if "apex" in n.value.lower():
                found = True

    node.visit(V())
    return found


def _install_guard_candidates(module: cst.Module) -> bool:
    """Whether `module` has a `try` whose ImportError handler mentions apex (cheap, from the index)."""
    from .index import ModuleIndex

    for t in ModuleIndex.of(module).tries:
        for h in t.handlers:
            if h.type is not None and (dotted_name(h.type) or "") in ("ImportError", "ModuleNotFoundError") \
                    and _mentions_apex(h):
                return True
    return False


def _unwrap_install_guards(module: cst.Module, ctx: FileContext, report: bool = True) -> cst.Module:
    """`try: <imports> except ImportError: raise ImportError("install apex")` -> the imports alone.

    Left behind when an apex import inside the guard was replaced by its torch equivalent.
    """
    if not _install_guard_candidates(module):
        return module
    plan = EditPlan()

    class V(cst.CSTVisitor):
        def visit_Try(self, n: cst.Try) -> None:
            body = n.body.body if isinstance(n.body, cst.IndentedBlock) else []
            if not body or n.orelse or n.finalbody or len(n.handlers) != 1:
                return
            if not all(isinstance(s, cst.SimpleStatementLine) and all(
                    isinstance(x, (cst.Import, cst.ImportFrom)) for x in s.body) for s in body):
                return
            h = n.handlers[0]
            if h.type is None or (dotted_name(h.type) or "") not in ("ImportError", "ModuleNotFoundError"):
                return
            hbody = h.body.body if isinstance(h.body, cst.IndentedBlock) else []
            if not hbody or not all(isinstance(s, cst.SimpleStatementLine) and all(
                    isinstance(x, (cst.Raise, cst.Expr)) for x in s.body) for s in hbody):
                return
            if not _mentions_apex(h):
                return
            plan.replace_stmt[n] = list(body)
            if report:
                ctx.report(n, R.APEX_IMPORT.code, "`install apex` guard around a torch import removed", fixed=True)

    module.visit(V())
    return apply_plan(module, plan) if plan else module


def _strip_leading_blank_lines(module: cst.Module) -> cst.Module:
    """After removing a file's first statement, do not leave it starting with blank lines."""
    if not module.body:
        return module
    first = module.body[0]
    lead = list(getattr(first, "leading_lines", ()))
    while lead and lead[0].comment is None:
        lead.pop(0)
    header = list(module.header)
    if header and all(h.comment is None for h in header):
        header = []
    return module.with_changes(header=header, body=[first.with_changes(leading_lines=lead)] + list(module.body[1:]))


