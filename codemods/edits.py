"""Planned edits keyed by node identity, applied in one transform.

Codemods first analyse the original tree (with metadata) and record what to change at which node
(an EditPlan); `apply_plan` then rewrites the tree once (codemods/edit_apply.py), cleaning up the
blocks a removal empties and keeping the comments of removed statements (codemods/edit_comments.py).
"""
from __future__ import annotations

from typing import Callable, Dict, List, Sequence, Tuple

import libcst as cst

from .edit_apply import PlanApplier
from .walk import Visitor

StmtList = List[cst.BaseStatement]


class EditPlan:
    def __init__(self) -> None:
        self.replace_node: Dict[cst.CSTNode, cst.CSTNode] = {}
        self.replace_stmt: Dict[cst.CSTNode, StmtList] = {}
        self.before: Dict[cst.CSTNode, StmtList] = {}
        self.after: Dict[cst.CSTNode, StmtList] = {}
        self.transforms: Dict[cst.CSTNode, Callable[[cst.CSTNode], cst.CSTNode]] = {}
        self.wraps: List[Tuple[cst.BaseStatement, cst.BaseStatement, Callable[[StmtList], cst.BaseStatement]]] = []

    def __bool__(self) -> bool:
        return bool(self.replace_node or self.replace_stmt or self.before or self.after
                    or self.transforms or self.wraps)

    def snapshot(self) -> Tuple[Dict, ...]:
        """The plan as it is now, for `restore` (a conversion that turns out impossible midway)."""
        return (dict(self.replace_node), {k: list(v) for k, v in self.replace_stmt.items()},
                {k: list(v) for k, v in self.before.items()}, {k: list(v) for k, v in self.after.items()},
                dict(self.transforms), list(self.wraps))

    def restore(self, snap: Tuple[Dict, ...]) -> None:
        (self.replace_node, self.replace_stmt, self.before, self.after, self.transforms,
         self.wraps) = snap  # type: ignore[assignment]

    def touched(self) -> List[cst.CSTNode]:
        out: List[cst.CSTNode] = []
        out.extend(self.replace_node)
        out.extend(self.replace_stmt)
        out.extend(self.before)
        out.extend(self.after)
        out.extend(self.transforms)
        return out

    def remove(self, stmt: cst.CSTNode) -> None:
        self.replace_stmt[stmt] = []

    def insert_before(self, stmt: cst.CSTNode, new: Sequence[cst.BaseStatement]) -> None:
        self.before.setdefault(stmt, []).extend(new)

    def insert_after(self, stmt: cst.CSTNode, new: Sequence[cst.BaseStatement]) -> None:
        self.after.setdefault(stmt, []).extend(new)

    def wrap(self, first: cst.BaseStatement, last: cst.BaseStatement,
             make: Callable[[StmtList], cst.BaseStatement]) -> None:
        self.wraps.append((first, last, make))


def contains(outer: cst.CSTNode, inner: cst.CSTNode) -> bool:
    """Whether `inner` (by identity) is `outer` or inside it."""
    if outer is inner:
        return True
    found = False

    class V(Visitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            nonlocal found
            if node is inner:
                found = True
            return not found

    outer.visit(V())
    return found


_PASS_MARK = "__apex2amp_pass__"


def apply_plan(module: cst.Module, plan: EditPlan) -> cst.Module:
    """Apply `plan` to `module` (the very tree whose nodes the plan names)."""
    if not plan:
        return module
    result = _applier(module, plan).rebuild(module)
    assert isinstance(result, cst.Module)
    return result


def _applier(module: cst.Module, plan: EditPlan) -> PlanApplier:
    """The `PlanApplier` of `plan` on `module`: the paths to the planned nodes, and which of them are `elif`s."""
    from .index import ModuleIndex

    index = ModuleIndex.of(module)
    targets = plan.touched() + [n for w in plan.wraps for n in (w[0], w[1])]
    apply = PlanApplier(plan, index.paths_to(targets) | {id(module)})
    for node in targets:
        parent = index.parent(node)
        if isinstance(node, cst.If) and isinstance(parent, cst.If) and parent.orelse is node:
            apply.elifs.add(id(node))
    return apply

