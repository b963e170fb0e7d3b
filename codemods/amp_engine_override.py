"""Engine classes, one per precision backend: a base method that steps the amp optimizer (A2A418).

    class Engine:                      # fp32, also the base of the other backends
        def optimizer_step(self):
            self.optimizer.step()
    class ApexEngine(Engine):          # amp.initialize in __init__, results on self
        ...
    class NativeEngine(Engine): ...    # its own scaler and optimizer_step

The base method runs for every backend, so it cannot take the apex engine's scaler. The apex engine
gets its own override instead: a copy of the base method with the scaler's step and update, so
`ApexEngine` objects step through their GradScaler while `Engine` and its other subclasses keep the
base method unchanged. Done only for a plain method (no decorator, no `super()`, no private `__names`)
of an in-module base of the class that keeps the scaler, which that class does not define itself.
"""
from __future__ import annotations

import libcst as cst

from . import amp_threading
from .edits import EditPlan, apply_plan
from .walk import iter_nodes


def override_base_steps(a, rule_) -> None:
    """Move the scaler edits planned in base-class methods into overrides on the scaler's class."""
    held = amp_threading.outer_method(a, a.init_func)
    if held is None:
        return
    holder = held[1]
    allowed = amp_threading.holder_classes(a, holder.name.value)
    graph = amp_threading._bases(a)
    ancestors = amp_threading._closure(graph, holder.name.value, up=True)
    own = {s.name.value for s in holder.body.body if isinstance(s, cst.FunctionDef)}
    for f in sorted((u for u in a.user_funcs if u is not None), key=lambda u: a.ctx.line_of(u)):
        om = amp_threading.outer_method(a, f)
        if om is None or om[0] is not f or om[1].name.value in allowed or om[1].name.value not in ancestors:
            continue
        if f.decorators or f.name.value in own or _reads_super_or_private(f) or \
                _super_calls(a, f.name.value) or _read_through_class(a, om[1].name.value, f.name.value):
            continue
        copy = _rewritten_copy(a, f)
        if copy is None:
            continue
        last = holder.body.body[-1]
        a.plan.insert_after(last, [copy.with_changes(leading_lines=[cst.EmptyLine(indent=False)])])
        a.user_funcs.discard(f)
        own.add(f.name.value)
        a.report(f, rule_, f"`{om[1].name.value}.{f.name.value}` steps the amp optimizer for `{holder.name.value}` "
                           f"objects too: `{holder.name.value}` now overrides it with the scaler's step; "
                           f"`{om[1].name.value}` and its other subclasses keep theirs", fixed=True)


def _reads_super_or_private(f: cst.FunctionDef) -> bool:
    return any(isinstance(n, cst.Name) and (n.value == "super" or n.value.startswith("__") and
                                            not n.value.endswith("__")) for n in iter_nodes(f))


def _super_calls(a, name: str) -> bool:
    """Whether the module calls `super().<name>(...)` (the override would change what it runs)."""
    for c in a.index.calls:
        f = c.func
        if isinstance(f, cst.Attribute) and f.attr.value == name and isinstance(f.value, cst.Call) and \
                isinstance(f.value.func, cst.Name) and f.value.func.value == "super":
            return True
    return False


def _read_through_class(a, cls: str, name: str) -> bool:
    """Whether the module reads `Base.<name>` (`Engine.optimizer_step(engine)` skips any override)."""
    return any(isinstance(n, cst.Attribute) and n.attr.value == name and isinstance(n.value, cst.Name) and
               n.value.value == cls for n in a.index.nodes)


def _rewritten_copy(a, f: cst.FunctionDef):
    """`f` with the plan's edits inside it applied; those edits leave the plan (the base stays as it is)."""
    plan = a.plan
    sub = EditPlan()
    inside = lambda n: a.index.contains(f, n) and n is not f  # noqa: E731
    for attr in ("replace_node", "replace_stmt", "before", "after", "transforms"):
        src, dst = getattr(plan, attr), getattr(sub, attr)
        for k in [k for k in src if inside(k)]:
            dst[k] = src.pop(k)
    moved = [w for w in plan.wraps if inside(w[0]) and inside(w[1])]
    if any((inside(w[0]) != inside(w[1])) for w in plan.wraps):
        return None
    for w in moved:
        plan.wraps.remove(w)
        sub.wraps.append(w)
    if not sub:
        return None
    # a copy of its own: the base keeps `f`, and a tree must not hold one node object twice
    return apply_plan(cst.Module(body=[f]), sub).body[0].deep_clone()
