"""How one autocast region meets the statements around it: backward-helper calls it may not include, early
exits it may include, and a planned region of another loss it must join.

Three questions `RegionPlanning.plan_region` (codemods/amp_plan_region.py) asks:
- does a statement call a backward helper (`loss_backward(loss_G, optG)`: a function of this module that
  runs a backward or steps, or another module's helper known from the facts)? Then, like a direct
  `loss.backward()`, it stays outside every region: the loss computed after it gets a region of its own;
- may a `return` / `break` / `continue` (`if not torch.isfinite(loss): return results`) sit inside the
  region? Leaving a `with torch.autocast(...)` block exits the context manager, so yes, when the exit
  skips no half-done scaler state: nothing before it in the same iteration has stepped, unscaled or run a
  backward whose `scaler.step` / `scaler.update` the exit would skip;
- does a second loss overlap the region planned for the first (a GAN's discriminator loss reading the
  generator's `fake` before either backward)? Then the planned region grows over it, provided every
  statement it grows over is part of the second loss's computation (or calls nothing); otherwise the
  module is refused (A2A116, A2A117) and left byte-identical.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Set

import libcst as cst

from . import amp_rules as R
from . import backward_helpers
from .walk import iter_nodes

EXITS = (cst.Return, cst.Break, cst.Continue)
# calls whose work a skipped `scaler.step` / `scaler.update` would leave half done
_SCALER_WORK = ("backward", "step", "unscale_", "scale_loss")
_BACKWARD_WORK = ("backward", "step", "unscale_", "scale_loss")


def runs_backward(a, stmt: cst.CSTNode) -> bool:
    """Whether `stmt` calls a function of this module that runs a backward or steps (directly or through
    other functions of this module), or another module's backward helper known from the facts."""
    known = _known_helpers(a)
    for n in iter_nodes(stmt):
        if type(n) is not cst.Call:
            continue
        if known and a.table.qualified_names(n.func) & known:  # type: ignore[attr-defined]
            return True
        if any(_holds_backward(a, d, set()) for d in _local_callees(a, n)):  # type: ignore[arg-type]
            return True
    return False


def _known_helpers(a) -> Set[str]:
    cached = getattr(a, "_known_helpers_cache", None)
    if cached is None:
        cached = set()
        if a.ctx.facts.extra:
            from .amp_plan_threading import called_modules, visible_modules
            visible = visible_modules(a.ctx.facts, a.ctx, called_modules(a))
            cached = set(backward_helpers.known(a.ctx.facts, visible))
        a._known_helpers_cache = cached
    return cached


def _local_callees(a, call: cst.Call) -> List[cst.FunctionDef]:
    """The functions of this module `call` may run: `f(...)` a module-level function, `self.m(...)` a method."""
    funcs: Dict[str, List[cst.FunctionDef]] = a._functions()
    f = call.func
    if isinstance(f, cst.Name):
        return [d for d in funcs.get(f.value, []) if a.class_of(d) is None and a.func_of(d) is None]
    if isinstance(f, cst.Attribute) and isinstance(f.value, cst.Name) and f.value.value == "self":
        return [d for d in funcs.get(f.attr.value, []) if a.class_of(d) is not None]
    return []


def _holds_backward(a, func: cst.FunctionDef, seen: Set[int]) -> bool:
    if id(func) in seen:
        return False
    seen.add(id(func))
    for n in iter_nodes(func.body):
        if type(n) is not cst.Call:
            continue
        f = n.func  # type: ignore[attr-defined]
        if isinstance(f, cst.Attribute) and f.attr.value in _BACKWARD_WORK:
            return True
        if any(_holds_backward(a, d, seen) for d in _local_callees(a, n)):  # type: ignore[arg-type]
            return True
    return False


def region_exits(a, rng: Sequence[cst.CSTNode], inner_exits) -> List[cst.CSTNode]:
    """The return/break/continue statements of `rng` that leave the region's block (not an inner loop)."""
    out: List[cst.CSTNode] = []
    for s in rng:
        inner = inner_exits(s)
        out.extend(n for n in iter_nodes(s) if type(n) in EXITS and id(n) not in inner)
    return out


def exits_leave_clean_state(a, rng: Sequence[cst.CSTNode], exits: List[cst.CSTNode]) -> bool:
    """Whether every exit of `exits` (inside `rng`) skips no half-done scaler work: in the blocks around
    the region, up to the loop the exit leaves (break/continue) or the function (return), no statement
    before the region runs a backward, an optimizer step, an unscale_ or a backward helper."""
    for ex in exits:
        target = _exit_target(a, ex)
        cur: cst.CSTNode = rng[0]
        while True:
            block, idx = a.block_of(cur)
            if block is None:
                return False
            for s in block.body[:idx]:  # type: ignore[attr-defined]
                if _does_scaler_work(a, s):
                    return False
            owner = a.parent(block)
            if isinstance(owner, (cst.Else, cst.ExceptHandler, cst.Finally)):
                owner = a.parent(owner)
            while isinstance(owner, cst.If) and isinstance(a.parent(owner), cst.If) and a.parent(owner).orelse is owner:
                owner = a.parent(owner)
            if owner is None or owner is target or isinstance(owner, (cst.FunctionDef, cst.ClassDef, cst.Module)):
                break
            cur = owner
    return True


def _exit_target(a, ex: cst.CSTNode) -> Optional[cst.CSTNode]:
    cur = a.parent(ex)
    while cur is not None and not isinstance(cur, (cst.FunctionDef, cst.Module)):
        if isinstance(ex, (cst.Break, cst.Continue)) and isinstance(cur, (cst.For, cst.While)):
            return cur
        cur = a.parent(cur)
    return cur


def _does_scaler_work(a, stmt: cst.CSTNode) -> bool:
    for n in iter_nodes(stmt):
        if type(n) is cst.Call and isinstance(n.func, cst.Attribute) and \
                n.func.attr.value in _SCALER_WORK:  # type: ignore[attr-defined]
            return True
    return runs_backward(a, stmt)


def join_planned(a, block: cst.CSTNode, start: int, end: int, traced: Sequence[cst.CSTNode],
                 anchor: cst.CSTNode) -> Optional[bool]:
    """A planned region of this block that [start, end] overlaps: True when it covers the new
    range already or now grows over it (one region for both losses); False when it may not grow (the
    module is refused, A2A116); None when no planned region overlaps the range."""
    body = block.body  # type: ignore[attr-defined]
    for k, (b, f, l) in enumerate(a._regions):
        if b is not block or end < f or start > l:  # adjoining regions stay two
            continue
        if f <= start and end <= l:
            return True
        lo, hi = min(f, start), max(l, end)
        mine = {id(s) for s in traced}
        loose = [s for i, s in enumerate(body[lo:hi + 1], lo) if not f <= i <= l and id(s) not in mine and
                 any(type(n) is cst.Call for n in iter_nodes(s))]
        others = [r for j, r in enumerate(a._regions) if j != k and r[0] is block and not (hi < r[1] or lo > r[2])]
        wrap = next((w for w, (first, last, _) in enumerate(a.plan.wraps) if first is body[f] and last is body[l]),
                    None)
        if loose or others or wrap is None:
            what = (f"`{_first_line(a, loose[0])}` (line {_line(a, loose[0])}), which is no part of this loss's "
                    "computation and may run a backward or step" if loose else
                    "another region planned in between")
            a.report(anchor, R.NO_REGION, f"this loss is computed from the forward pass of the autocast region at line "
                                          f"{_line(a, body[f])}, so one region must cover both, but it would grow over "
                                          f"{what}: wrap the forward passes and both losses in one "
                                          "`torch.autocast(...)` by hand")
            a._unsafe = "no autocast region can cover the forward pass the loss comes from"
            return False
        make = a.plan.wraps[wrap][2]
        a.plan.wraps[wrap] = (body[lo], body[hi], make)
        a._regions[k] = (block, lo, hi)
        return True
    return None


def _first_line(a, stmt: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(stmt).strip().splitlines()[0]


def _line(a, node: cst.CSTNode) -> int:
    return a.ctx.line_of(node)
