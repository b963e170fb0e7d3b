"""Remove apex imports the migration left unused, with their guards (A2A110, A2A118, A2A123).

Runs after every rewriting codemod. An apex name that is no longer referenced loses its import; a
`try/except ImportError` around it goes when emptied (with the `amp = None` / `has_apex = False`
fallbacks); asserts and `if not has_apex: raise ...` checks that only guard apex go; every other read
of a flag folds to True (`args.fp16 and has_apex` -> `args.fp16`, `return has_apex` -> `return True`).
A flag that cannot fold everywhere (rebound, deleted, named in a string) keeps its definition. Names
still used keep their import and get a finding.

The codemod decides what goes and edits the import statements; where the names are still read is
codemods/apex_uses.py, which flag reads fold is codemods/flag_reads.py, the folding itself
codemods/fold_flags.py, and the install checks and guards codemods/apex_install_checks.py.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Set

import libcst as cst

from . import amp_rules as R
from .apex_extension_names import APEX_EXTENSIONS
from .apex_names import Resolver
from .apex_install_checks import (apex_probes, install_checks, install_guard_candidates, module_keeping_apex,
                                  skip_gate, unwrap_install_guards)
from .apex_uses import apex_uses, forward_references, guard_homes, kept_by_comment
from .base import INFO, Codemod, FileContext, facts_key, named_from
from .edits import EditPlan, apply_plan
from .flag_leftovers import torch_import_beside_flag, unwrap_torch_only_tries
from .flag_reads import foldable_flag_reads
from .fold_flags import FoldStatements, flag_constant
from .guards import apex_flag_tries, apex_locals, imports_from_apex
from .import_fallbacks import _catches_import_error, _is_fallback_stmt, alias_lines, alias_targets, drop_fallback_uses
from .index import ModuleIndex
from .mode_rules import APEX_FLAG_LEFTOVER
from .names import ImportTable, dotted_name, import_bound_names
from .rule_owners import owner_deselected
from .try_imports import extension_imports

FP16_UTILS_EXPORTS = {
    "FP16_Optimizer", "FP16Model", "network_to_half", "tofp16", "BN_convert_float", "prep_param_lists",
    "model_grads_to_master_grads", "master_params_to_model_params", "to_python_float", "clip_grad_norm",
    "convert_module", "convert_network", "DynamicLossScaler", "LossScaler",
}
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
            return unwrap_install_guards(module, ctx)
        flag_tries = apex_flag_tries(module, table)
        flags = set(flag_tries)
        kept_flags: Dict[str, Optional[cst.CSTNode]] = {}
        while True:
            homes = guard_homes(ModuleIndex.of(module), table, locals_, {f: flag_tries[f] for f in flags})
            uses, guard_stmts, fallback_assigns, guard_comparisons = apex_uses(module, homes, locals_)
            uses, fallback_tries = drop_fallback_uses(module, uses, locals_)
            flag_reads: List[cst.Name] = []
            if not flags or any(uses.get(name) for name in locals_):
                break  # flags go only with every apex import
            flag_reads, stuck = foldable_flag_reads(wrapper, flags, uses, fallback_assigns + guard_stmts)
            if not stuck:
                break
            flags = flags - set(stuck)
            kept_flags.update(stuck)
        gate = None
        if flag_tries and not any(uses.get(name) for name in locals_) \
                and not set(ctx.changed_by) & APEX_CODEMODS:
            gate = skip_gate(ModuleIndex.of(module), set(flag_tries))
        if gate is not None:
            ctx.report(gate, R.LEFTOVER.code, "apex is imported here only to check that it is installed, and the "
                                              "flag decides which tests are skipped: the code under test may still "
                                              "need apex (a library, a module this run did not migrate), so the "
                                              "check stays; fold it by hand once nothing needs apex")
            return module
        keeper = module_keeping_apex(ctx) if not any(uses.get(name) for name in locals_) else None
        checks = install_checks(module, flags | locals_) if keeper is not None else []
        if checks:
            ctx.report(checks[0], R.INSTALL_CHECK_KEPT.code, f"`{keeper}` keeps its apex amp code (see its "
                       "findings): this apex install check and the imports it tests stay, so that a run without "
                       "apex still stops here with its clear error; they go once that module migrates",
                       severity=INFO)
            return module
        plan = EditPlan()
        probes = apex_probes(module, table)
        for name, stmt in sorted(probes.items()):
            ctx.report(stmt, R.LEFTOVER.code, f"`{name}` is imported beside other imports in this `try` only to "
                                              "check that apex is installed: it stays while the code it guards "
                                              "may need apex")
        # flags and `amp is None` checks inside other expressions fold to constants
        typed = forward_references(ModuleIndex.of(module), locals_)
        key = facts_key(ctx.path, ctx.module_name) if ctx.module_name else ""
        imported_elsewhere = _near(ctx.facts.reexports.get(key, {}) if key else {}, ctx.path)
        removable = {name for name in locals_ if not uses.get(name) and name not in probes and name not in typed
                     and name not in imported_elsewhere}
        kept = locals_ - removable - _alias_fallbacks(fallback_tries, imported_elsewhere, table, ctx, plan, module)
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
                    if not all(kept_by_comment(use, ctx) for use in uses[name]):
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
                    if id(stmt) in done or (_empties_its_try(stmt, index, removable)
                                            and not _fallback_only_try(stmt, index, removable)):
                        continue
                    if not imports_from_apex(stmt) and _fallback_only_try(stmt, index, removable):
                        continue  # the fallback in a handler: goes with its emptied `try`
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
        constants = [flag_constant(True, name) for name in flag_reads] + [flag_constant(
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
            new_module = new_module.visit(FoldStatements(constants, paths))
        beside_torch = sorted(f for f in flags if torch_import_beside_flag(flag_tries.get(f, [])))
        if beside_torch:
            for f in beside_torch:
                ctx.report(flag_tries[f][0], APEX_FLAG_LEFTOVER.code, f"apex flag `{f}` removed: the imports "
                           "left beside it come from torch and cannot fail, so its tests fold to True", fixed=True)
            new_module = unwrap_torch_only_tries(new_module, module)
        if not install_guard_candidates(module):
            return new_module
        return unwrap_install_guards(new_module, ctx, report=False)

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


def _near(importers: Dict[str, str], path: str) -> Dict[str, str]:
    """`importers` (name -> the file importing it), each file named from this file's folder."""
    return {n: named_from(p, path) for n, p in importers.items()}


def _alias_fallbacks(fallback_tries, imported_elsewhere, table: ImportTable, ctx: FileContext, plan: EditPlan,
                     module: cst.Module) -> Set[str]:
    """A fallback `try` (codemods/import_fallbacks.py) whose names other modules import from here becomes
    `Name = torch.nn.LayerNorm`; the names so bound."""
    res = Resolver.of(module, ctx.module_name)
    out: Set[str] = set()
    for t, bound in fallback_tries:
        if not bound & set(imported_elsewhere):
            continue
        targets = alias_targets(t, bound, table)
        spelled = {n: res.spelling(q, q) for n, q in targets.items()}
        if not targets or (any(v.startswith("torch.") for v in spelled.values()) and not res.has_torch()):
            continue
        plan.replace_stmt[t] = alias_lines(t, targets, lambda q: res.spelling(q, q))
        for name in sorted(bound):
            where = imported_elsewhere.get(name, "other modules")
            ctx.report(t, "A2A310", f"`{name}` (apex's FusedLayerNorm, or this file's fallback class without apex) "
                       f"-> `{name} = {spelled[name]}`, the class this module's own uses now build, kept "
                       f"for {where}, which imports it from here; under autocast the output is fp32 (apex returned "
                       "the autocast/param dtype)", fixed=True)
        out |= bound
    return out


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


def _fallback_only_try(stmt: cst.CSTNode, index: ModuleIndex, removable: Set[str]) -> bool:
    """Whether the `try` around the import `stmt` only imports unused apex names, and its handlers (ImportError)
    only bind those same names elsewhere (`from .local import Norm as FusedLayerNorm`, a fallback class):
    the whole `try` is then dead, and goes with its handlers even while other apex code stays."""
    t = next((a for a in index.ancestors(stmt) if isinstance(a, cst.Try)), None)
    if t is None or t.orelse is not None or t.finalbody is not None or not t.handlers:
        return False
    bound: Set[str] = set()
    for s in t.body.body if isinstance(t.body, cst.IndentedBlock) else []:
        for small in s.body if isinstance(s, cst.SimpleStatementLine) else [s]:
            if not isinstance(small, (cst.Import, cst.ImportFrom)) or not imports_from_apex(small):
                return False
            bound |= import_bound_names(small)
    if not bound or not bound <= removable:
        return False
    for h in t.handlers:
        if not _catches_import_error(h) or not isinstance(h.body, cst.IndentedBlock) or h.name is not None:
            return False
        for s in h.body.body:
            smalls = s.body if isinstance(s, cst.SimpleStatementLine) else []
            if smalls and all(isinstance(x, (cst.Import, cst.ImportFrom)) and not isinstance(
                    getattr(x, "names", None), cst.ImportStar) and import_bound_names(x) <= bound for x in smalls):
                continue
            if not _is_fallback_stmt(s, bound):
                return False
    return True


# codemods that rewrite apex code: when one of them changed the file, its apex names were read
APEX_CODEMODS = {"amp", "apex_modules", "apex_parallel", "manual_scaling"}


def _report_extension_imports(module: cst.Module, ctx: FileContext) -> None:
    """A2A172 at each import of one of apex's compiled extensions (`import amp_C`): it stays, and needs apex."""
    for stmt in ModuleIndex.of(module).imports:
        names = extension_imports(stmt)
        if names:
            ctx.report(stmt, R.APEX_EXTENSION_KEPT.code, f"`{names[0]}` is apex's compiled extension: it has no torch "
                       "equivalent and needs apex installed; replace the code that uses it, then remove the import")


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
