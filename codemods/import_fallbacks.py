"""The plain-PyTorch fallback of an apex import: `try: from apex.normalization.fused_layer_norm import
FusedLayerNorm as BertLayerNorm` / `except ImportError: class BertLayerNorm(nn.Module): ...` (BERT-era
code everywhere). The fallback ran only without apex; once the module's own uses of the name are
migrated to torch (codemods/fused_norms.py), the class's own references to its name (`class
BertLayerNorm`, `super(BertLayerNorm, self)`) are the last "uses". They are not uses of apex: with
them dropped, the import goes (A2A110) and the `try` with its fallback goes too (the emptied `try`
takes its handlers along). Where other modules import the name from here, the `try` becomes
`BertLayerNorm = torch.nn.LayerNorm` instead (A2A310), the torch class the module's own uses now
build, for FusedLayerNorm only (its constructor is torch's); other names keep the import (A2A118).
"""
from __future__ import annotations

from typing import Dict, List, Set, Tuple

import libcst as cst

from .guards import imports_from_apex
from .names import ImportTable, dotted_name, import_bound_names

HANDLED = {"ImportError", "ModuleNotFoundError", "Exception"}
QUIET_CALLS = {"print", "warn", "warning", "info", "debug", "error"}
# apex classes whose torch twin takes the same constructor: a name imported from here may alias it
ALIASES = {"apex.normalization.FusedLayerNorm": "torch.nn.LayerNorm",
           "apex.normalization.fused_layer_norm.FusedLayerNorm": "torch.nn.LayerNorm"}


def _catches_import_error(handler: cst.ExceptHandler) -> bool:
    t = handler.type
    if t is None:
        return True
    items = [e.value for e in t.elements] if isinstance(t, cst.Tuple) else [t]
    return bool(items) and all((dotted_name(i) or "").rpartition(".")[2] in HANDLED for i in items)


def _is_fallback_stmt(stmt: cst.BaseStatement, bound: Set[str]) -> bool:
    """A statement a fallback may hold: a class / def of one of `bound`, `name = ...` of one of them,
    a print or warning, `pass`."""
    if isinstance(stmt, (cst.ClassDef, cst.FunctionDef)):
        return stmt.name.value in bound and not stmt.decorators
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    for small in stmt.body:
        if isinstance(small, cst.Pass):
            continue
        if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) and \
                (dotted_name(small.value.func) or "").rpartition(".")[2] in QUIET_CALLS:
            continue
        if isinstance(small, cst.Assign) and all(isinstance(t.target, cst.Name) and t.target.value in bound
                                                 for t in small.targets):
            continue
        return False
    return True


def _fallback_tries(module: cst.Module) -> List[Tuple[cst.Try, Set[str]]]:
    """Each `try` holding only apex imports, whose handlers (ImportError) only define fallbacks of
    the names imported, with the names it imports."""
    out: List[Tuple[cst.Try, Set[str]]] = []

    class V(cst.CSTVisitor):
        def visit_Try(self, node: cst.Try) -> None:
            if node.orelse is not None or node.finalbody is not None or not node.handlers:
                return
            bound: Set[str] = set()
            for s in node.body.body:
                if not isinstance(s, cst.SimpleStatementLine):
                    return
                for small in s.body:
                    if not isinstance(small, (cst.Import, cst.ImportFrom)) or not imports_from_apex(small):
                        return
                    bound |= import_bound_names(small)
            if not bound:
                return
            for h in node.handlers:
                if not _catches_import_error(h) or not isinstance(h.body, cst.IndentedBlock):
                    return
                if not all(_is_fallback_stmt(s, bound) for s in h.body.body):
                    return
            out.append((node, bound))

    module.visit(V())
    return out


def _inside(node: cst.CSTNode, outer: cst.CSTNode) -> bool:
    found = False

    class V(cst.CSTVisitor):
        def on_visit(self, n: cst.CSTNode) -> bool:
            nonlocal found
            if n is node:
                found = True
            return not found

    outer.visit(V())
    return found


def drop_fallback_uses(module: cst.Module, uses: Dict[str, List[cst.Name]], locals_: Set[str]
                       ) -> Tuple[Dict[str, List[cst.Name]], List[Tuple[cst.Try, Set[str]]]]:
    """`uses` without the references inside the fallbacks of a `try` whose names the module no longer
    uses anywhere else, and those `try`s with their names."""
    if not any(uses.get(n) for n in locals_):
        return uses, []
    done: List[Tuple[cst.Try, Set[str]]] = []
    out = dict(uses)
    for t, bound in _fallback_tries(module):
        if not bound <= locals_:
            continue
        inside: Dict[str, List[cst.Name]] = {}
        ok = True
        for name in bound:
            here = [u for u in uses.get(name, []) if any(_inside(u, h) for h in t.handlers)]
            if len(here) != len(uses.get(name, [])):
                ok = False  # still used outside its fallback
                break
            inside[name] = here
        if ok:
            for name in bound:
                out[name] = []
            done.append((t, bound))
    return out, done


def alias_targets(t: cst.Try, bound: Set[str], table: ImportTable) -> Dict[str, str]:
    """For a fallback `try` whose names another module imports: each name's torch class (empty when
    one of them has no torch twin with the same constructor)."""
    out: Dict[str, str] = {}
    for name in bound:
        torch_names = {ALIASES[q] for q in table.bindings.get(name, set()) if q in ALIASES}
        if len(torch_names) != 1:
            return {}
        out[name] = torch_names.pop()
    return out


def alias_lines(t: cst.Try, targets: Dict[str, str], spell) -> List[cst.BaseStatement]:
    """`BertLayerNorm = nn.LayerNorm` lines in place of the `try` (its leading comments kept)."""
    lines: List[cst.BaseStatement] = []
    for i, name in enumerate(sorted(targets)):
        value = cst.parse_expression(spell(targets[name]))
        line = cst.SimpleStatementLine(body=[cst.Assign(targets=[cst.AssignTarget(cst.Name(name))], value=value)])
        if i == 0:
            line = line.with_changes(leading_lines=t.leading_lines)
        lines.append(line)
    return lines
