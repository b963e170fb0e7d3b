"""Remove apex imports the migration left unused, with their guards (A2A110, A2A118, A2A123).

Runs after every rewriting codemod. An apex name that is no longer referenced loses its import; a
`try/except ImportError` around it goes when emptied (with the `amp = None` / `has_apex = False`
fallbacks); asserts and `if not has_apex: raise ...` checks that only guard apex go; every other read
of a flag folds to True (`args.fp16 and has_apex` -> `args.fp16`, `return has_apex` -> `return True`).
A flag that cannot fold everywhere (rebound, deleted, named in a string) keeps its definition. Names
still used keep their import and get a finding.
"""
from __future__ import annotations

import re
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

import libcst as cst
from libcst.metadata import ScopeProvider

from . import amp_rules as R
from .base import INFO, Codemod, FileContext, facts_key
from .edit_comments import Lines, close_block, comment_lines, rehome_comments, with_comments_before
from .edits import EditPlan, apply_plan
from .index import ModuleIndex
from .flag_leftovers import torch_import_beside_flag, unwrap_torch_only_tries
from .mode_rules import APEX_FLAG_LEFTOVER
from .guards import FoldApexGuards, apex_flag_tries, apex_locals, imported_packages, imports_from_apex
from .names import ImportTable, dotted_name, import_bound_names, names_read
from .rule_owners import owner_deselected
from .apex_extension_names import APEX_EXTENSIONS
from .try_imports import extension_imports
from .walk import Visitor, iter_nodes

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
    CODES = ("A2A110", "A2A118", "A2A123", "A2A132", "A2A172", "A2A175")
    # apex's extensions (`import amp_C`, A2A172), in files that may not name apex
    TOKENS = tuple(sorted(n.encode() for n in APEX_EXTENSIONS))
    # an import of apex, or an install check's message ("Please install NVIDIA Apex")
    WORDS = (b"apex", b"Apex", b"APEX")

    def transform(self, wrapper: cst.MetadataWrapper, ctx: FileContext) -> cst.Module:
        module = wrapper.module
        table = ImportTable.of(module, ctx.module_name)
        _report_extension_imports(module, ctx)
        locals_ = apex_locals(table)
        star = {m: nodes for m, nodes in table.star_modules.items() if m == "apex" or m.startswith("apex.")}
        if not locals_ and not star:
            return _unwrap_install_guards(module, ctx)
        flag_tries = apex_flag_tries(module, table)
        flags = set(flag_tries)
        kept_flags: Dict[str, Optional[cst.CSTNode]] = {}
        while True:
            homes = _homes(ModuleIndex.of(module), table, locals_, {f: flag_tries[f] for f in flags})
            uses, guard_stmts, fallback_assigns, guard_comparisons = _apex_uses(module, homes, locals_)
            flag_reads: List[cst.Name] = []
            if not flags or any(uses.get(name) for name in locals_):
                break  # flags go only with every apex import
            flag_reads, stuck = _flag_reads(wrapper, flags, uses, fallback_assigns + guard_stmts)
            if not stuck:
                break
            flags = flags - set(stuck)
            kept_flags.update(stuck)
        gate = None
        if flag_tries and not any(uses.get(name) for name in locals_) \
                and not set(ctx.changed_by) & APEX_CODEMODS:
            gate = _test_gate(ModuleIndex.of(module), set(flag_tries))
        if gate is not None:
            ctx.report(gate, R.LEFTOVER.code, "apex is imported here only to check that it is installed, and the "
                                              "flag decides which tests are skipped: the code under test may still "
                                              "need apex (a library, a module this run did not migrate), so the "
                                              "check stays; fold it by hand once nothing needs apex")
            return module
        keeper = _module_keeping_apex(ctx) if not any(uses.get(name) for name in locals_) else None
        checks = _install_checks(module, flags | locals_) if keeper is not None else []
        if checks:
            ctx.report(checks[0], R.INSTALL_CHECK_KEPT.code, f"`{keeper}` keeps its apex amp code (see its "
                       "findings): this apex install check and the imports it tests stay, so that a run without "
                       "apex still stops here with its clear error; they go once that module migrates",
                       severity=INFO)
            return module
        plan = EditPlan()
        probes = _apex_probes(module, table)
        for name, stmt in sorted(probes.items()):
            ctx.report(stmt, R.LEFTOVER.code, f"`{name}` is imported beside other imports in this `try` only to "
                                              "check that apex is installed: it stays while the code it guards "
                                              "may need apex")
        # flags and `amp is None` checks inside other expressions fold to constants
        typed = _forward_references(ModuleIndex.of(module), locals_)
        key = facts_key(ctx.path, ctx.module_name) if ctx.module_name else ""
        imported_elsewhere = ctx.facts.reexports.get(key, {}) if key else {}
        removable = {name for name in locals_ if not uses.get(name) and name not in probes and name not in typed
                     and name not in imported_elsewhere}
        kept = locals_ - removable
        index = ModuleIndex.of(module)
        at_module_level = {name for name in removable if _bound_at_module_level(table, name, index)}
        if at_module_level and key:  # other files may import these from here
            ctx.exported.dropped_imports[key] = sorted(at_module_level)
        if kept:
            # something from apex is still used: leave guards and flags alone
            for name in sorted(kept - set(probes)):
                if owner_deselected(table.bindings.get(name, ()), ctx.enabled):
                    continue  # left for its own rule, which this run's selection leaves out
                bound = table.statements.get(name, [])
                # the import that binds the name from apex (a fallback import of it from elsewhere comes first)
                for stmt in ([s for s in bound if imports_from_apex(s)] or bound)[:1]:
                    if name in imported_elsewhere and not uses.get(name):
                        ctx.report(stmt, R.LEFTOVER.code, f"apex name `{name}` is imported from this module by "
                                                          f"{imported_elsewhere[name]}: its import stays so that "
                                                          "import keeps working; point that file at the torch "
                                                          "equivalent (or migrate it), then remove this one")
                        continue
                    if not uses.get(name):
                        ctx.report(stmt, R.LEFTOVER.code, f"apex name `{name}` is named in a string annotation or "
                                                          "`cast()`: its import stays for type checkers; migrate "
                                                          "those, then remove it")
                        continue
                    if not all(_kept_by_comment(use, ctx) for use in uses[name]):
                        ctx.report(stmt, R.LEFTOVER.code, f"apex name `{name}` is still used ({len(uses[name])} "
                                                          "use(s)); its import stays until those are migrated")
                seen_lines: Set[int] = set()
                for use in uses.get(name, []):
                    line = ctx.line_of(use)
                    if line in seen_lines:
                        continue
                    seen_lines.add(line)
                    ctx.report(use, R.LEFTOVER.code, f"apex `{name}` still used here: migrate this use by hand "
                                                     "(see `apex2amp explain` of the other findings on this line)")
            for s in fallback_assigns:
                kept_here = sorted({dotted_name(t.target) or "" for t in s.body[0].targets} & kept)  # type: ignore
                if kept_here:
                    ctx.report(s, R.LEFTOVER.code, f"fallback for apex `{kept_here[0]}` stays with its import "
                                                   "while apex is still used")
            # imports of names nothing uses any more still go, unless they sit in a guard (try/except)
            done: Set[int] = set()
            for name in sorted(removable):
                for stmt in table.statements.get(name, []):
                    if id(stmt) in done or _empties_its_try(stmt, index, removable):
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
        for flag, node in sorted(kept_flags.items()):
            ctx.report(node, R.APEX_IMPORT.code, f"apex flag `{flag}` kept: it is rebound, deleted or named in a "
                                                 "string elsewhere; with no apex import left it starts True",
                       severity=INFO)
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
        constants = [_constant(True, name) for name in flag_reads] + [_constant(
            isinstance(c.comparisons[0].operator, cst.IsNot), c) for c in guard_comparisons]  # type: ignore
        for node, constant in zip(flag_reads + guard_comparisons, constants):
            plan.replace_node[node] = constant
        self._star_findings(star, uses, ctx, plan)
        new_module = apply_plan(module, plan) if plan else module
        if plan and ModuleIndex.of(new_module, base=module).code.startswith(("\n", "\r\n")) \
                and not ModuleIndex.of(module).code.startswith(("\n", "\r\n")):
            new_module = _strip_leading_blank_lines(new_module)
        if constants:
            paths = ModuleIndex.of(new_module, base=module).paths_to(constants)
            new_module = new_module.visit(_FoldStatements(constants, paths))
        beside_torch = sorted(f for f in flags if torch_import_beside_flag(flag_tries.get(f, [])))
        if beside_torch:
            for f in beside_torch:
                ctx.report(flag_tries[f][0], APEX_FLAG_LEFTOVER.code, f"apex flag `{f}` removed: the imports "
                           "left beside it come from torch and cannot fail, so its tests fold to True", fixed=True)
            new_module = unwrap_torch_only_tries(new_module, module)
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


def _apex_uses(module: cst.Module, homes: Dict[str, Set[int]], locals_: Set[str]
               ) -> Tuple[Dict[str, List[cst.Name]], List[cst.CSTNode], List[cst.CSTNode], List[cst.CSTNode]]:
    """Where the module still reads names, outside imports and apex guards, in source order.

    `homes` maps each guard name (apex local or flag) to the scopes that define it (see `_scope_id`).
    Returns (uses by name, guard statements, `amp = None`-style fallback assignments in a scope
    defining the name, `amp is (not) None` comparisons); the last three and the imports are not
    searched for uses. Attribute names, keyword names of arguments are not uses.
    """
    index = ModuleIndex.of(module)
    # an ALL_CAPS name imported from apex (`HAS_UCC`) is a feature constant, not apex itself: a test of it
    # checks that feature, not that apex is installed
    guard_names = {n for n in homes if not (n in locals_ and n.isupper())}
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
        elif t is cst.Import or t is cst.ImportFrom or t is cst.Global or t is cst.Nonlocal:
            return (node,)  # `global amp` beside a lazy `from apex import amp` reads nothing
        elif (t is cst.SimpleStatementLine or t is cst.If) and _is_guard_stmt(node, guard_names):
            guard_stmts.append(node)
            return (node,)
        elif t is cst.SimpleStatementLine and len(node.body) == 1 and \
                isinstance(node.body[0], cst.Assign):  # type: ignore[attr-defined]
            a = node.body[0]  # type: ignore[attr-defined]
            tnames = {dotted_name(t.target) for t in a.targets}
            if tnames <= guard_names and isinstance(a.value, cst.Name) and \
                    a.value.value in ("None", "True", "False") and \
                    all(_scope_id(node, index) in homes[n] for n in tnames):  # type: ignore[index]
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

    index.walk_pruned(visit)
    return uses, guard_stmts, fallback_assigns, guard_comparisons


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _kept_by_comment(node: cst.CSTNode, ctx: FileContext) -> bool:
    """Whether an `# apex2amp: ignore` comment sits on the line of `node` (which then stays apex's)."""
    return bool(ctx.suppressions) and ctx.line_of(node) in ctx.suppressions.lines


def _forward_references(index: ModuleIndex, names: Set[str]) -> Set[str]:
    """The `names` a string annotation (`x: "FusedAdam"`, `Optional["FusedAdam"]`) or the type
    argument of `cast("FusedAdam", ...)` refers to: a type checker reads them, so their imports
    (often under `if TYPE_CHECKING:`) are not unused."""
    out: Set[str] = set()
    for s in index.strings:
        if not any(name in s.value for name in names) or not _is_type_string(s, index):
            continue
        try:
            text = s.evaluated_value
        except Exception:  # pragma: no cover - a string libcst cannot evaluate names nothing
            continue
        if isinstance(text, str):
            out.update(names.intersection(_IDENTIFIER.findall(text)))
    return out


def _is_type_string(s: cst.SimpleString, index: ModuleIndex) -> bool:
    """Whether `s` is (inside) an annotation, or the first argument of a `cast(...)` call."""
    parent = index.parent(s)
    if isinstance(parent, cst.Arg) and parent.keyword is None:
        call = index.parent(parent)
        if isinstance(call, cst.Call) and call.args and call.args[0] is parent and \
                (dotted_name(call.func) or "").rpartition(".")[2] == "cast":
            return True
    for a in index.ancestors(s):
        if isinstance(a, cst.Annotation):
            return True
        if isinstance(a, (cst.BaseStatement, cst.BaseSmallStatement)):
            return False
    return False


def _scope_id(node: cst.CSTNode, index: ModuleIndex) -> int:
    """id() of the function, lambda or class whose scope `node` is in (0: the module's)."""
    for a in index.ancestors(node):
        if isinstance(a, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return id(a)
    return 0


def _homes(index: ModuleIndex, table: ImportTable, locals_: Set[str], flag_tries: Dict[str, List[cst.Try]]
           ) -> Dict[str, Set[int]]:
    """Each apex local and flag with the scopes that define it: those of its imports, or of its `try`s."""
    homes = {name: {_scope_id(stmt, index) for stmt in table.statements.get(name, [])} for name in locals_}
    for flag, tries in flag_tries.items():
        homes[flag] = {_scope_id(t, index) for t in tries}
    return homes


def _flag_reads(wrapper: cst.MetadataWrapper, flags: Set[str], uses: Dict[str, List[cst.Name]],
                removed: Sequence[cst.CSTNode], exact: bool = False
                ) -> Tuple[List[cst.Name], Dict[str, Optional[cst.CSTNode]]]:
    """The reads of `flags` that fold to True once `removed` (their definitions and guards) goes, and the
    flags that must stay, each with the removed statement that defines it (to report at).

    A flag must stay when a read cannot become `True` (`del flag`, a string annotation), when a scope
    binds it by more than the removed statements (`global flag; flag = ...`, `flag += ...`), or when a
    string names it (`__all__`, `globals()["flag"]`). Reads of another binding of the same name (a
    parameter, a class attribute) are not the flag's.

    The common case, module-level flags whose name nothing else binds, is answered from the index
    (`_plain_flag_reads`); the rest, or `exact`, take libcst's scope analysis (costly: it walks the
    whole module with several metadata visitors).
    """
    index = ModuleIndex.of(wrapper.module)
    named = set()
    for s in index.strings:
        try:
            named.add(s.evaluated_value)
        except Exception:  # pragma: no cover - a string libcst cannot evaluate names nothing
            pass
    stuck = flags & named
    if not any(uses.get(flag) for flag in flags - stuck):
        return [], _first_definitions(stuck, removed)
    inside = {id(n) for stmt in removed for n in iter_nodes(stmt)}
    if not exact:
        plain = _plain_flag_reads(index, flags - stuck, inside, removed)
        if plain is not None:
            return plain, _first_definitions(stuck, removed)
    scopes = {scope for scope in wrapper.resolve(ScopeProvider).values() if scope is not None}
    reads: List[cst.Name] = []
    for flag in sorted(flags - stuck):
        ours = {a for scope in scopes for a in scope.assignments[flag] if id(a.node) in inside}
        accesses = [a for scope in scopes for a in scope.accesses[flag]
                    if id(a.node) not in inside and not ours.isdisjoint(a.referents)]
        if any(a not in ours for own in ours for a in own.scope.assignments[flag]) or any(
                not ours.issuperset(a.referents) or not isinstance(a.node, cst.Name) or _deleted(a.node, index)
                for a in accesses):
            stuck.add(flag)
        else:
            reads.extend(a.node for a in accesses)  # type: ignore[misc]
    return reads, _first_definitions(stuck, removed)


# (node type, field): a Name in that field binds (or declares, or deletes) the name.
_BINDING_SLOTS = {(cst.AssignTarget, "target"), (cst.AnnAssign, "target"), (cst.AugAssign, "target"),
                  (cst.For, "target"), (cst.CompFor, "target"), (cst.NamedExpr, "target"), (cst.Del, "target"),
                  (cst.AsName, "name"), (cst.FunctionDef, "name"), (cst.ClassDef, "name"), (cst.Param, "name"),
                  (cst.ImportAlias, "name"), (cst.NameItem, "name"), (cst.MatchAs, "name"),
                  (cst.MatchStar, "name"), (cst.MatchMapping, "rest")}
_BINDING_SLOTS |= {(getattr(cst, t), "name") for t in ("TypeVar", "TypeVarTuple", "ParamSpec", "TypeAlias")
                   if hasattr(cst, t)}
# a Name in one of these fields is no reference at all
_ATTRIBUTE_SLOTS = {(cst.Attribute, "attr"), (cst.Arg, "keyword"), (cst.MatchKeywordElement, "key")}
_TARGET_PARTS = (cst.Element, cst.StarredElement, cst.Tuple, cst.List)


def _name_role(name: cst.Name, index: ModuleIndex) -> str:
    """"read", "attribute" (no reference: `x.name`, `f(name=...)`) or "other" (a binding, a
    declaration, a deletion or a part of an import)."""
    child: cst.CSTNode = name
    parent = index.parent(name)
    while isinstance(parent, _TARGET_PARTS):  # `a, (flag, b) = ...`: the slot is the outer target's
        child, parent = parent, index.parent(parent)
    for t, field in _BINDING_SLOTS:
        if type(parent) is t and getattr(parent, field) is child:
            return "other"
    if child is name and any(type(parent) is t and getattr(parent, f) is name for t, f in _ATTRIBUTE_SLOTS):
        return "attribute"
    if any(isinstance(a, (cst.Import, cst.ImportFrom)) for a in index.ancestors(name)):
        return "other"
    return "read"


def _plain_flag_reads(index: ModuleIndex, flags: Set[str], inside: Set[int], removed: Sequence[cst.CSTNode]
                      ) -> Optional[List[cst.Name]]:
    """The flags' reads, when scoping cannot matter: the flags are defined at module level and their
    names are bound, declared, deleted or imported nowhere else, and no string holds them (a string
    annotation reads them). Every other Name of that value then reads the module binding. None when
    that does not hold (the caller asks libcst's scope analysis)."""
    if any(_scope_id(stmt, index) != 0 for stmt in removed):
        return None
    if any(flag in s.value for s in index.strings for flag in flags):
        return None
    reads: List[cst.Name] = []
    for n in index.names:
        if n.value not in flags or id(n) in inside:
            continue
        role = _name_role(n, index)
        if role == "other":
            return None
        if role == "read":
            reads.append(n)
    return reads


def _first_definitions(flags: Set[str], removed: Sequence[cst.CSTNode]) -> Dict[str, Optional[cst.CSTNode]]:
    """Each flag with the first of the removed statements that assigns it (None when none does)."""
    out: Dict[str, Optional[cst.CSTNode]] = dict.fromkeys(flags)
    for stmt in removed:
        for n in iter_nodes(stmt):
            if isinstance(n, cst.AssignTarget) and isinstance(n.target, cst.Name) and \
                    n.target.value in flags and out[n.target.value] is None:
                out[n.target.value] = stmt
    return out


def _deleted(name: cst.Name, index: ModuleIndex) -> bool:
    """Whether `name` is a target of `del` (alone or in a tuple or list)."""
    node: Optional[cst.CSTNode] = index.parent(name)
    while isinstance(node, (cst.Element, cst.StarredElement, cst.Tuple, cst.List)):
        node = index.parent(node)
    return isinstance(node, cst.Del)


def _constant(value: bool, replaced: cst.BaseExpression) -> cst.Name:
    """`True`/`False` in the place of `replaced`, keeping its parentheses."""
    return cst.Name("True" if value else "False", lpar=replaced.lpar, rpar=replaced.rpar)


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


class _FoldStatements(FoldApexGuards):
    """Simplify around the constants that replaced apex flags and `amp is (not) None`: boolean
    operators, `a if C else b`, and `if`/`elif`/`assert` statements whose test became constant.

    Only those constants fold: a `True`/`False` the user wrote stays as written.
    """

    def __init__(self, constants: Iterable[cst.Name], paths: Optional[Set[int]] = None):
        super().__init__(set(), set())
        self.ours: Dict[int, cst.CSTNode] = {id(c): c for c in constants}
        self.paths = paths  # ids of the constants and their ancestors: nothing else can fold
        self._elifs: Set[int] = set()  # ids of the If nodes that are another If's `elif`
        self.produced: Dict[int, int] = {}  # id(original statement) -> how many statements it became
        self.carried: Dict[int, Lines] = {}  # id(original statement) -> comments of a removed statement

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.paths is not None and id(node) not in self.paths:
            return False  # no constant below: the subtree stays as it is (and keeps its identity)
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> Any:
        if self.paths is not None and id(original_node) not in self.paths:
            return updated_node
        return super().on_leave(original_node, updated_node)

    def _own(self, node: cst.CSTNode) -> cst.CSTNode:
        self.ours[id(node)] = node
        return node

    def constant(self, node: cst.BaseExpression) -> Optional[bool]:
        if self.ours.get(id(node)) is node and isinstance(node, cst.Name):
            return node.value == "True"
        return None

    def make_constant(self, value: bool) -> cst.Name:
        return self._own(super().make_constant(value))  # type: ignore[return-value]

    def keep(self, e: cst.BaseExpression, outer: cst.BaseExpression) -> cst.BaseExpression:
        kept = super().keep(e, outer)
        return self._own(kept) if self.constant(e) is not None else kept  # type: ignore[return-value]

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        return self._own(updated) if self.ours.get(id(original)) is original else updated  # type: ignore

    def leave_IfExp(self, original: cst.IfExp, updated: cst.IfExp) -> cst.BaseExpression:
        value = self.constant(updated.test)
        if value is None:
            return updated
        return self.keep(updated.body if value else updated.orelse, updated)

    # -- statements ---------------------------------------------------------------------------
    def visit_If(self, node: cst.If) -> None:
        if isinstance(node.orelse, cst.If):
            self._elifs.add(id(node.orelse))

    def leave_If(self, original: cst.If, updated: cst.If):
        dropped = self.carried.pop(id(original.orelse), []) if isinstance(original.orelse, cst.If) else []
        if dropped and updated.orelse is None and isinstance(updated.body, cst.IndentedBlock):
            # comments above a removed `elif` end the body before it
            updated = updated.with_changes(body=updated.body.with_changes(footer=[*updated.body.footer, *dropped]))
        test = updated.test
        if id(original) in self._elifs:
            return self._fold_elif(original, updated, test)
        comments = comment_lines(updated.leading_lines)
        if self.constant(test) is True:
            if isinstance(updated.body, cst.IndentedBlock):
                return self._flatten(original, updated.body.body, comments)
            return updated
        if self.constant(test) is False:
            if isinstance(updated.orelse, cst.Else) and isinstance(updated.orelse.body, cst.IndentedBlock):
                return self._flatten(original, updated.orelse.body.body,
                                     comments + comment_lines(updated.orelse.leading_lines))
            if isinstance(updated.orelse, cst.If):
                return with_comments_before(updated.orelse, comments)
            return self._remove(original, comments)
        return updated

    def _flatten(self, original: cst.CSTNode, body: Sequence[cst.BaseStatement], comments: Lines):
        self.produced[id(original)] = len(body)
        return cst.FlattenSentinel([with_comments_before(body[0], comments), *body[1:]])

    def _remove(self, original: cst.CSTNode, comments: Lines) -> cst.RemovalSentinel:
        self.produced[id(original)] = 0
        if comments:
            self.carried[id(original)] = comments
        return cst.RemovalSentinel.REMOVE

    def _fold_elif(self, original: cst.If, updated: cst.If, test: cst.BaseExpression):
        """An `elif` stands in its parent's `orelse`, which takes an If, an Else or nothing: a true
        test makes its body the `else:`, a false one hands the place to what follows it."""
        if self.constant(test) is True:
            return cst.Else(body=updated.body, leading_lines=updated.leading_lines,
                            whitespace_before_colon=updated.whitespace_after_test)
        if self.constant(test) is False:
            comments = comment_lines(updated.leading_lines)
            if updated.orelse is not None:
                return with_comments_before(updated.orelse, comments)
            return self._remove(original, comments)
        return updated

    def leave_Assert(self, original: cst.Assert, updated: cst.Assert):
        if self.constant(updated.test) is True:
            return cst.RemovalSentinel.REMOVE
        return updated

    def leave_SimpleStatementLine(self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine):
        if original.body and not updated.body:
            return self._remove(original, comment_lines(updated.leading_lines))
        return updated

    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
        body, leftover = rehome_comments(original.body, updated.body, self.produced, self.carried, indented=True)
        return close_block(updated, body, leftover)  # type: ignore[return-value]

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        body, leftover = rehome_comments(original.body, updated.body, self.produced, self.carried)
        return close_block(updated, body, leftover)  # type: ignore[return-value]


def _bound_at_module_level(table: ImportTable, name: str, index: ModuleIndex) -> bool:
    """Whether an import of `name` sits outside every function and class (another module can import
    only those bindings)."""
    return any(not any(isinstance(a, (cst.FunctionDef, cst.ClassDef)) for a in index.ancestors(stmt))
               for stmt in table.statements.get(name, []))


def _empties_its_try(stmt: cst.CSTNode, index: ModuleIndex, removable: Set[str]) -> bool:
    """Whether the `try` around the import `stmt` would have nothing left once the unused apex imports go
    (it then still says "apex is needed here" for the apex import that stays: leave it whole)."""
    t = next((a for a in index.ancestors(stmt) if isinstance(a, cst.Try)), None)
    if t is None:
        return False
    body = t.body.body if isinstance(t.body, cst.IndentedBlock) else []
    for s in body:
        smalls = s.body if isinstance(s, cst.SimpleStatementLine) else [s]
        for small in smalls:
            if not isinstance(small, (cst.Import, cst.ImportFrom)) or not import_bound_names(small) <= removable:
                return False
    return True


# codemods that rewrite apex code: when one of them changed the file, its apex names were read
APEX_CODEMODS = {"amp", "apex_modules", "apex_parallel", "manual_scaling"}
SKIP_MARKERS = {"skipif", "skipIf", "skipUnless", "skip_if", "skip_unless"}
SKIP_CALLS = {"skip", "skipTest"}


def _test_gate(index: ModuleIndex, flags: Set[str]) -> Optional[cst.CSTNode]:
    """The first test-skip condition that reads one of `flags`: `pytest.mark.skipif(not HAS_APEX, ...)`,
    `unittest.skipUnless(HAS_APEX, ...)`, or an `if` on the flag whose body calls `pytest.skip(...)` /
    `self.skipTest(...)`. An apex flag there says whether apex is installed for the code under test,
    which may live in another package: folding it to True would run tests that still need apex."""
    for name in index.names:
        if name.value not in flags:
            continue
        for node in index.ancestors(name):
            if isinstance(node, cst.Call) and _callee(node) in SKIP_MARKERS:
                return node
            if isinstance(node, cst.If) and index.contains(node.test, name) and any(
                    _callee(c) in SKIP_CALLS for c in index.calls_in(node.body)):
                return node
    return None


def _callee(call: cst.Call) -> str:
    func = call.func
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return func.value if isinstance(func, cst.Name) else ""


def _apex_probes(module: cst.Module, table: ImportTable) -> Dict[str, cst.CSTNode]:
    """A bare `import apex`, read nowhere, in a `try` that also imports another library (not torch):
    `import apex` above `from megatron.core.fusions.fused_layer_norm import FusedLayerNorm` checks
    that apex is there for the code beside it. Name -> its import statement."""
    out: Dict[str, cst.CSTNode] = {}
    index = ModuleIndex.of(module)
    for t in index.tries:
        body = t.body.body if isinstance(t.body, cst.IndentedBlock) else []
        smalls = [small for s in body if isinstance(s, cst.SimpleStatementLine) for small in s.body
                  if isinstance(small, (cst.Import, cst.ImportFrom))]
        probes = [small for small in smalls if isinstance(small, cst.Import) and
                  any(dotted_name(a.name) == "apex" and a.asname is None for a in small.names)]
        others = [small for small in smalls if not imports_from_apex(small) and imported_packages(small) - {"torch"}]
        if probes and others and not index.reads("apex"):
            out["apex"] = probes[0]
    return out


def _mentions_apex(node: cst.CSTNode) -> bool:
    found = False

    class V(Visitor):
        def visit_SimpleString(self, n: cst.SimpleString) -> None:
            nonlocal found
            if "apex" in n.value.lower():
                found = True

    node.visit(V())
    return found


def _report_extension_imports(module: cst.Module, ctx: FileContext) -> None:
    """A2A172 at each import of one of apex's compiled extensions (`import amp_C`): it stays, and needs apex."""
    for stmt in ModuleIndex.of(module).imports:
        names = extension_imports(stmt)
        if names:
            ctx.report(stmt, R.APEX_EXTENSION_KEPT.code, f"`{names[0]}` is apex's compiled extension: it has no torch "
                       "equivalent and needs apex installed; replace the code that uses it, then remove the import")


def _module_keeping_apex(ctx: FileContext) -> Optional[str]:
    """Another module of the run whose apex amp code stays (pass 1's `unmigrated_amp`), if any."""
    return next((m for m in ctx.facts.unmigrated_amp if m != ctx.module_name), None)


def _install_checks(module: cst.Module, guard_names: Set[str]) -> List[cst.CSTNode]:
    """`if <test reading an apex flag or name>: raise/print/warn ...` and asserts of them, in source order."""
    found: List[cst.CSTNode] = []

    class V(Visitor):
        def visit_If(self, n: cst.If) -> None:
            if n.orelse is None and names_read(n.test) & guard_names and \
                    _is_guard_stmt(n, names_read(n.test) | {"None"}):
                found.append(n)

        def visit_Assert(self, n: cst.Assert) -> None:
            if names_read(n.test) & guard_names:
                found.append(n)

    module.visit(V())
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

    class V(Visitor):
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


