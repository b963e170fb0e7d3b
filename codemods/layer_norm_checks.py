"""`isinstance(m, FusedLayerNorm)` / `issubclass` checks -> torch.nn.LayerNorm (A2A310), once every
apex norm the module builds or derives from is rewritten to torch's (the check would otherwise no
longer match what the migrated code builds), and only then."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Set

import libcst as cst

from .apex_modules_state import ModulesRun
from .apex_names import Resolver
from .edits import EditPlan
from .fused_norms import LAYER_NORMS
from .index import ModuleIndex
from .names import code_of
from .walk import iter_nodes

TYPE_CHECKS = ("isinstance", "issubclass")


def _classinfo(check: cst.Call) -> Optional[cst.BaseExpression]:
    """The classes argument of a type check, when it is the second of two plain positional arguments."""
    if len(check.args) != 2 or any(a.keyword is not None or a.star for a in check.args):
        return None
    return check.args[1].value


def apex_norms_left(index: ModuleIndex, res: "Resolver", plan: EditPlan, checks: Sequence[cst.Call]) -> bool:
    """Whether the migrated module may still hold apex layer norms, so that a type check must keep
    matching apex's class: a reference to one (any of them: MixedFusedLayerNorm derives from
    FusedLayerNorm) that is not a call or base `plan` rewrites, a type check's class, an import, a
    name being bound, or the value of a plain alias (`BertLayerNorm = FusedLayerNorm`, whose own uses
    are references too): `norm = FusedLayerNorm if fused else nn.LayerNorm`, `partial(FusedLayerNorm)`,
    a call held with a finding. Inside a class of the same name (the fallback `class BertLayerNorm` of
    an apex import guard), the name is that class."""
    allowed = {id(c.func) for c in index.calls if c in plan.replace_node}
    allowed.update(id(n) for n in plan.replace_node if isinstance(n, (cst.Name, cst.Attribute)))  # bases
    for check in checks:
        classinfo = _classinfo(check)
        if classinfo is not None:
            allowed.add(id(classinfo))
            if isinstance(classinfo, cst.Tuple):
                allowed.update(id(e.value) for e in classinfo.elements)
    for node in list(index.names) + list(index.attributes):
        if id(node) in allowed or res.apex_name(node) not in LAYER_NORMS:
            continue
        parent = index.parent(node)
        if isinstance(parent, cst.Attribute) and parent.attr is node:
            continue  # the last part of a dotted name: the dotted name itself is looked at
        if isinstance(parent, (cst.ClassDef, cst.FunctionDef, cst.AsName)) and parent.name is node or \
                isinstance(parent, cst.AssignTarget) or \
                isinstance(parent, cst.Assign) and parent.value is node and \
                all(isinstance(t.target, cst.Name) for t in parent.targets):
            continue
        spelled = code_of(node)
        if any(isinstance(a, (cst.Import, cst.ImportFrom)) or isinstance(a, cst.ClassDef) and a.name.value == spelled
               for a in index.ancestors(node)):
            continue  # an import, or `super(BertLayerNorm, self)` in the fallback class of that name
        return True
    return False


def _same_type_check(other: cst.BaseExpression, check: cst.Call, classinfo: cst.BaseExpression) -> bool:
    """Whether `other` is `check` (a type check) with `classinfo` as its classes: `check` once rewritten."""
    return isinstance(other, cst.Call) and code_of(other.func) == code_of(check.func) and len(other.args) == 2 \
        and code_of(other.args[0].value) == code_of(check.args[0].value) \
        and code_of(other.args[1].value) == code_of(classinfo)


def _classes_tuple(classinfo: cst.Tuple, new_of: Dict[int, cst.BaseExpression]) -> cst.BaseExpression:
    """`classinfo` with the classes `new_of` names replaced, a class now written twice kept once, and a
    tuple left with one class unwrapped to it: `(nn.LayerNorm, FusedLayerNorm)` -> `nn.LayerNorm`.
    A tuple holding a comment only has its classes replaced (dropping one could drop the comment)."""
    kept: List[cst.BaseElement] = []
    seen: Set[str] = set()
    shorten = "#" not in code_of(classinfo)
    written = {code_of(v) for v in new_of.values()} if shorten else set()
    for element in classinfo.elements:
        new = new_of.get(id(element.value)) if isinstance(element, cst.Element) else None
        value = new if new is not None else element.value
        spelled = code_of(value) if isinstance(element, cst.Element) else None
        if spelled in seen and spelled in written:
            continue
        if spelled is not None:
            seen.add(spelled)
        kept.append(element.with_changes(value=value))
    if shorten and len(kept) == 1 and isinstance(kept[0], cst.Element):
        return kept[0].value
    if len(kept) < len(classinfo.elements):
        kept[-1] = kept[-1].with_changes(comma=classinfo.elements[-1].comma)
    return classinfo.with_changes(elements=kept)


class TypeCheckRewrites(ModulesRun):
    """The type checks naming an apex layer norm."""

    def layer_norm_type_check(self, node: cst.Call, index: ModuleIndex) -> None:
        """`isinstance(m, FusedLayerNorm)` (or issubclass, or a tuple of classes) -> torch.nn.LayerNorm.
        Called once every apex norm this module builds or derives from is rewritten to torch's: the
        migrated code then builds torch LayerNorms, which the apex class would no longer match."""
        classinfo = _classinfo(node)
        if classinfo is None:
            return
        elements = classinfo.elements if isinstance(classinfo, cst.Tuple) else None
        targets = [e.value for e in elements if isinstance(e, cst.Element)] if elements is not None else [classinfo]
        new_of: Dict[int, cst.BaseExpression] = {}
        for target in targets:
            q = self.res.apex_name(target)
            if q not in LAYER_NORMS or self.res.other_binding(target) is not None or not self._ok(target, "A2A310"):
                continue
            new_of[id(target)] = self._callee("torch.nn.LayerNorm", "torch.nn.LayerNorm")
            self.ctx.report(target, "A2A310", f"{node.func.value} check: {q.rsplit('.', 1)[1]} -> torch.nn.LayerNorm "  # type: ignore[attr-defined]
                            "(the migrated code builds torch LayerNorms; the check now matches every "
                            "torch LayerNorm)", fixed=True)
        if not new_of:
            return
        if elements is None:
            new = new_of[id(classinfo)]
            either = index.parent(node)
            if isinstance(either, cst.BooleanOperation) and isinstance(either.operator, cst.Or):
                other = either.right if either.left is node else either.left
                beside = other  # in `a or b or c` (`(a or b) or c`), the operand next to the check
                while isinstance(beside, cst.BooleanOperation) and isinstance(beside.operator, cst.Or):
                    beside = beside.left if either.left is node else beside.right
                if _same_type_check(beside, node, new) and "#" not in code_of(either) and not any(
                        self.res.apex_name(n) in LAYER_NORMS for n in iter_nodes(other)
                        if isinstance(n, (cst.Name, cst.Attribute))):  # nothing else to rewrite in there
                    # `isinstance(m, nn.LayerNorm) or isinstance(m, FusedLayerNorm)`: one check
                    self.plan.replace_node[either] = other.with_changes(lpar=either.lpar, rpar=either.rpar)
                    return
            self.plan.replace_node[classinfo] = new
            return
        self.plan.replace_node[classinfo] = _classes_tuple(classinfo, new_of)
