"""A step under a finite-norm test after the clip (`norm = clip(...)`; `if math.isfinite(norm): opt.step()
... else: <skip>`): `scaler.update()` on the skipping branch too, so that every path from the
`scaler.unscale_` before the clip reaches one update (GradScaler refuses a second unscale_ before it).

apex's scale_loss updated the scale on every iteration, and an overflow made the clipped norm
non-finite, so the skipping branch is the overflow one: there GradScaler's `update()` halves the scale as
apex did. The test may only read the norm the clip returned, and every other binding of that name must
be a finite number (`norm = -1` before a clip under `if max_norm > 0:`), so the skipping branch is never
taken without the unscale_ (an update with no inf check recorded would raise)."""
from __future__ import annotations

from typing import Optional

import libcst as cst

from .early_exits import may_exit_early
from .names import assigned_names, dotted_name
from .walk import iter_nodes


def finite_gate(a, clip_stmt: cst.CSTNode, window_stmt: cst.CSTNode, step_stmt: cst.CSTNode,
                func: Optional[cst.FunctionDef]) -> Optional[cst.If]:
    """The `if isfinite(norm): <step> else: ...` that follows the clip and holds the step directly,
    when the shape above is provable; None otherwise."""
    if func is None:
        return None
    gate = _gate_if(a, window_stmt, step_stmt)
    if gate is None or not isinstance(gate.orelse, cst.Else) or \
            not isinstance(gate.orelse.body, cst.IndentedBlock) or not isinstance(gate.body, cst.IndentedBlock):
        return None
    body, si = a.block_of(step_stmt)
    if body is not gate.body or may_exit_early(list(gate.body.body[:si])):
        return None  # the step directly in the test's body, with no way out of it before the step
    test = gate.test
    if not (isinstance(test, cst.Call) and (dotted_name(test.func) or "").split(".")[-1] == "isfinite" and
            len(test.args) == 1 and test.args[0].keyword is None and test.args[0].star == "" and
            isinstance(test.args[0].value, cst.Name)):
        return None
    norm = test.args[0].value.value
    if norm not in assigned_names(clip_stmt) or not _other_bindings_finite(func, clip_stmt, norm):
        return None
    # the same optimizer steps once in this function, and nothing leaves between the clip and the test
    if sum(1 for s in a._steps if s[2] is func) != 1:
        return None
    block, gi = a.block_of(gate)
    outer = _child_in(a, clip_stmt, block)
    if outer is None:
        return None
    _, ci = a.block_of(outer)
    between = list(block.body[ci + 1:gi]) + ([outer] if outer is not clip_stmt else [])
    if ci >= gi or may_exit_early(between):
        return None
    return gate


def _gate_if(a, clip_stmt: cst.CSTNode, step_stmt: cst.CSTNode) -> Optional[cst.If]:
    """The `if` holding the step that follows the clip (or a statement holding it) in one block."""
    here: Optional[cst.CSTNode] = clip_stmt
    while here is not None and not isinstance(here, (cst.FunctionDef, cst.Module)):
        block, idx = a.block_of(here)
        cur: Optional[cst.CSTNode] = step_stmt
        while block is not None and cur is not None:
            if isinstance(cur, cst.If):
                b, i = a.block_of(cur)
                if b is block and i > idx:
                    return cur
            cur = a.parent(cur)
        here = a.parent(here)
    return None


def _child_in(a, node: cst.CSTNode, block) -> Optional[cst.CSTNode]:
    cur: Optional[cst.CSTNode] = node
    while cur is not None:
        if isinstance(cur, cst.BaseStatement) and a.block_of(cur)[0] is block:
            return cur
        cur = a.parent(cur)
    return None


def _finite_literal(v: cst.BaseExpression) -> bool:
    if isinstance(v, cst.UnaryOperation) and isinstance(v.operator, (cst.Minus, cst.Plus)):
        v = v.expression
    return isinstance(v, (cst.Integer, cst.Float))


def _other_bindings_finite(func: cst.FunctionDef, clip_stmt: cst.CSTNode, name: str) -> bool:
    """Every binding of `name` in `func` other than the clip's is `name = <finite number>`."""
    for n in iter_nodes(func.body, lambda n: n is not clip_stmt):
        if n is clip_stmt:
            continue
        if isinstance(n, (cst.Global, cst.Nonlocal)) and any(x.name.value == name for x in n.names):
            return False
        if isinstance(n, (cst.AugAssign, cst.AnnAssign, cst.NamedExpr, cst.For, cst.CompFor, cst.AsName)):
            target = n.name if isinstance(n, cst.AsName) else n.target
            if name in _target_names(target):
                return False
        if isinstance(n, (cst.FunctionDef, cst.ClassDef)) and n.name.value == name:
            return False
        if isinstance(n, cst.Assign) and any(name in _target_names(t.target) for t in n.targets):
            if len(n.targets) != 1 or not isinstance(n.targets[0].target, cst.Name) or \
                    not _finite_literal(n.value):
                return False
    return True


def _target_names(t: cst.CSTNode) -> set:
    return {x.value for x in iter_nodes(t) if isinstance(x, cst.Name)}
