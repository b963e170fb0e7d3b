"""Gradient accumulation with a clip on every micro-batch: move the clip to the accumulation boundary.

apex unscaled the gradients on every `scale_loss` exit, so a clip after each micro-batch's backward saw
unscaled, partially accumulated gradients. `GradScaler.unscale_` may run once per step, so the migrated
clip belongs at the boundary, after `scaler.unscale_(opt)`, just before `scaler.step(opt)`. That clips the
whole accumulated gradient once instead of every partial sum: an unsafe fix (codemods/unsafe_fixes.py).

`boundary_of` decides whether the move changes nothing but that: the clip is a statement of its own whose
value is unused, the step sits in a later statement of the same block (`if (i + 1) % accum == 0:`), and no
statement in between rebinds a name the clip reads or reads a gradient.
"""
from __future__ import annotations

from typing import Callable, List, Optional, Set, Tuple

import libcst as cst

from .names import assigned_names
from .walk import iter_nodes

Parent = Callable[[cst.CSTNode], Optional[cst.CSTNode]]
BlockOf = Callable[[cst.CSTNode], Tuple[Optional[cst.CSTNode], int]]


def change_message(opt: str, both_branches: bool = False) -> str:
    """What the move changes numerically (the unsafe fix's finding); `both_branches`: the clips of the fp16
    and the fp32 branch become one, on the fp32 branch's parameters."""
    what = ("the clips of both branches (one clip on the fp32 branch's parameters)" if both_branches
            else "the clip")
    return (f"clip runs on every micro-batch but `{opt}.step()` only at the accumulation boundary: the fix moves "
            f"{what} to the boundary after `scaler.unscale_({opt})`, so it sees the whole accumulated gradient "
            "once per step instead of clipping the partial sums after every micro-batch (apex unscaled on every "
            "`scale_loss` exit); the result differs whenever a partial sum's norm exceeds max_norm")


def _lone_call(stmt: cst.CSTNode) -> bool:
    return isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and \
        isinstance(stmt.body[0], cst.Expr) and isinstance(stmt.body[0].value, cst.Call)


def _read_names(node: cst.CSTNode) -> Set[str]:
    out: Set[str] = set()
    for n in iter_nodes(node):
        if isinstance(n, cst.Name):
            out.add(n.value)
    return out


def _rebinds(stmt: cst.CSTNode, names: Set[str]) -> bool:
    for n in iter_nodes(stmt):
        if isinstance(n, cst.BaseStatement) or isinstance(n, cst.BaseSmallStatement):
            if any(a.split(".")[0] in names for a in assigned_names(n)):
                return True
        if isinstance(n, (cst.NamedExpr, cst.AsName, cst.CompFor)):
            target = n.target if not isinstance(n, cst.AsName) else n.name
            if any(isinstance(t, cst.Name) and t.value in names for t in iter_nodes(target)):
                return True
        if isinstance(n, (cst.Global, cst.Nonlocal, cst.Del)):
            return True
    return False


def _reads_grads(stmt: cst.CSTNode) -> bool:
    return any(isinstance(n, cst.Attribute) and n.attr.value in ("grad", "clip_grad_norm_", "clip_grad_value_")
               for n in iter_nodes(stmt))


def guard_unit(clip_stmt: cst.CSTNode, parent: Parent) -> cst.CSTNode:
    """`clip_stmt`, or the `if G:` (no `else`, no call in `G`) whose only statement it is (`if max_norm > 0:
    clip(...)`), outward: the statement that runs the clip and nothing else."""
    unit = clip_stmt
    while True:
        body = parent(unit)
        owner = parent(body) if isinstance(body, cst.IndentedBlock) else None
        if not (isinstance(owner, cst.If) and owner.body is body and len(body.body) == 1 and owner.orelse is None
                and isinstance(parent(owner), (cst.IndentedBlock, cst.Module))  # not an `elif`
                and not any(isinstance(n, (cst.Call, cst.NamedExpr, cst.Await, cst.Yield))
                            for n in iter_nodes(owner.test))):
            return unit
        unit = owner


def _moveable(stmt: cst.CSTNode) -> bool:
    """A lone call, or `if G: <moveable>` with no `else` and no call in `G` (the clip under its guard)."""
    while isinstance(stmt, cst.If) and stmt.orelse is None and isinstance(stmt.body, cst.IndentedBlock) and \
            len(stmt.body.body) == 1 and not any(isinstance(n, (cst.Call, cst.NamedExpr, cst.Await, cst.Yield))
                                                 for n in iter_nodes(stmt.test)):
        stmt = stmt.body.body[0]
    return _lone_call(stmt)


def branch_pair(clip_stmt: cst.CSTNode, parent: Parent) -> Optional[Tuple[cst.If, cst.CSTNode, cst.BaseStatement]]:
    """(the `if`, the clip's own unit, the else branch's last statement) when the clip, alone or under its
    guard (`guard_unit`), ends the body of an `if` whose `else` also ends in such a statement, both branches
    holding more (the backward) than that last statement."""
    unit = guard_unit(clip_stmt, parent)
    body = parent(unit)
    owner = parent(body) if isinstance(body, cst.IndentedBlock) else None
    if not (isinstance(owner, cst.If) and owner.body is body and body.body[-1] is unit and len(body.body) > 1):
        return None
    other = owner.orelse
    if not (isinstance(other, cst.Else) and isinstance(other.body, cst.IndentedBlock) and len(other.body.body) > 1):
        return None
    last = other.body.body[-1]
    return (owner, unit, last) if _moveable(last) else None


def boundary_of(clip_stmt: cst.CSTNode, moved: cst.CSTNode, step_stmt: cst.CSTNode, parent: Parent,
                block_of: BlockOf) -> Optional[cst.CSTNode]:
    """The boundary statement (a later sibling of `clip_stmt` holding `step_stmt`) when the clip `moved`
    (the clip statement as it will read after migration) can run just before `step_stmt`; else None."""
    if not _moveable(moved):
        return None
    block, i = block_of(clip_stmt)
    if block is None or not isinstance(parent(step_stmt), cst.IndentedBlock):
        return None
    boundary: Optional[cst.CSTNode] = step_stmt
    while boundary is not None and block_of(boundary)[0] is not block:
        boundary = parent(boundary)
    if boundary is None:
        return None
    j = block_of(boundary)[1]
    if j <= i:
        return None
    names = _read_names(moved)
    between = list(block.body[i + 1:j])  # type: ignore[attr-defined]
    if not isinstance(boundary, cst.If):
        return None
    # the boundary's own statements before the step, at every level down to the step (ifs only: a loop
    # or a `with` between the boundary and the step would not run the clip once per boundary)
    cur: cst.CSTNode = step_stmt
    while cur is not boundary:
        b, k = block_of(cur)
        if b is None:
            return None
        between.extend(b.body[:k])  # type: ignore[attr-defined]
        owner = parent(b)
        if isinstance(owner, cst.Else):
            owner = parent(owner)
        while isinstance(owner, cst.If) and isinstance(parent(owner), cst.If):  # an `elif`
            between.append(cst.Expr(owner.test))
            owner = parent(owner)
        if not isinstance(owner, cst.If):
            return None
        between.append(cst.Expr(owner.test))
        cur = owner
    for s in between:
        if (_rebinds(s, names) or _reads_grads(s)):
            return None
    return boundary



def _dead_names(func: cst.CSTNode, names: Set[str], parent: Parent) -> bool:
    """Whether every occurrence of `names` in `func` is the target of `name += ...` or `name = ...`: the
    function never reads them (accumulators kept for nothing, such as a sum of clip norms)."""
    for n in iter_nodes(func):
        if isinstance(n, cst.Name) and n.value in names:
            p = parent(n)
            if not (isinstance(p, cst.AugAssign) and p.target is n or isinstance(p, cst.AssignTarget) and p.target is n):
                return False
    return True


def _aug(stmt: cst.CSTNode) -> Optional[cst.AugAssign]:
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and \
            isinstance(stmt.body[0], cst.AugAssign) and isinstance(stmt.body[0].operator, cst.AddAssign) and \
            isinstance(stmt.body[0].target, cst.Name):
        return stmt.body[0]
    return None


def summed_pair(clip_stmt: cst.CSTNode, func: cst.CSTNode, parent: Parent
                ) -> Optional[Tuple[cst.If, List[cst.BaseStatement], cst.Call, List[str]]]:
    """`if fp16: <backward>; clip(amp.master_params(o), n) else: <backward>; total += clip(params, n)
    [; count += 1]` where the function reads neither `total` nor `count`: (the `if`, the else branch's tail
    from its clip on, that clip's call, the accumulator names). The fp32 branch's sum of norms is dead, so
    the clips may move to the boundary as in `branch_pair`, the tail with them."""
    body = parent(clip_stmt)
    owner = parent(body) if isinstance(body, cst.IndentedBlock) else None
    if not (_lone_call(clip_stmt) and isinstance(owner, cst.If) and owner.body is body and
            body.body[-1] is clip_stmt and len(body.body) > 1):
        return None
    other = owner.orelse
    if not (isinstance(other, cst.Else) and isinstance(other.body, cst.IndentedBlock)):
        return None
    stmts = list(other.body.body)
    k = next((i for i in range(len(stmts) - 1, -1, -1)
              if _aug(stmts[i]) is not None and isinstance(_aug(stmts[i]).value, cst.Call)), None)  # type: ignore
    if k is None or k < 1:
        return None
    names = [_aug(stmts[k]).target.value]  # type: ignore[union-attr]
    for s in stmts[k + 1:]:
        a = _aug(s)
        if a is None or not (isinstance(a.value, cst.Integer) and a.value.value == "1"):
            return None
        names.append(a.target.value)  # type: ignore[attr-defined]
    if len(set(names)) != len(names) or not _dead_names(func, set(names), parent):
        return None
    return owner, stmts[k:], _aug(stmts[k]).value, names  # type: ignore[union-attr,return-value]


def sums_message(opt: str, names: List[str]) -> str:
    """The unsafe fix's finding when the fp32 branch summed its clip norms into accumulators read nowhere."""
    spelled = " and ".join(f"`{n}`" for n in names)
    return (change_message(opt, True) + f"; {spelled} (the fp32 branch's sum of its clip norms, read nowhere in "
            "this function) move with the clip: they now count once per step, and in every mode")
