"""Engine classes, one per precision backend: a base method that steps the amp optimizer (A2A418).

    class Engine:                      # fp32, also the base of the other backends
        def optimizer_step(self):
            self.optimizer.step()
    class ApexEngine(Engine):          # amp.initialize in __init__, results on self
        ...
    class NativeEngine(Engine): ...    # its own scaler and optimizer_step

The base method runs for every backend, and the base alone is often the fp32 engine (no native
sibling needed for that), so it cannot take the apex engine's scaler. The apex engine gets its own
override instead: a copy of the base method with the scaler's step and update, so `ApexEngine`
objects step through their GradScaler while `Engine` and its other subclasses keep the base method
unchanged. Done only for a plain method (no decorator, no `super()`, no private `__names`) of an
in-module base of the class that keeps the scaler, which that class does not define itself and
which the class's MRO resolves to. Where it cannot be done, the module is refused (A2A126) unless
the base is abstract (`ABC` with an `@abstractmethod`). A base method that calls apex amp itself (a
mixin of the apex engine) keeps its edits in place (amp_threading.check_holder_reach).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from . import amp_threading
from .amp_threading import Refusal
from .names import dotted_name
from .edits import EditPlan, apply_plan
from .walk import iter_nodes


def override_base_steps(a, rule_) -> Optional[Refusal]:
    """Move the scaler edits planned in base-class methods into overrides on the scaler's class; a
    refusal where a base method needs the scaler, cannot be overridden and the base may have
    instances of its own (which hold no scaler)."""
    held = amp_threading.outer_method(a, a.init_func)
    if held is None:
        return None
    holder = held[1]
    graph = amp_threading._bases(a)
    ancestors = amp_threading._closure(graph, holder.name.value, up=True)
    own = {s.name.value for s in holder.body.body if isinstance(s, cst.FunctionDef)}
    methods: Dict[int, Tuple[cst.FunctionDef, cst.ClassDef, List[cst.FunctionDef]]] = {}
    for f in sorted((u for u in a.user_funcs if u is not None), key=lambda u: a.ctx.line_of(u)):
        om = amp_threading.outer_method(a, f)
        if om is not None and om[1].name.value in ancestors:
            methods.setdefault(id(om[0]), (om[0], om[1], []))[2].append(f)
    for m, base, needing in methods.values():
        if any(s.func is not None and a.index.contains(m, s.call) for s in a.sites):
            # it calls apex amp itself, which only works once `amp.initialize` ran (a mixin of the apex
            # engine): it reads the holder's scaler where the module proves every subclass holds it
            continue
        why = _why_not_override(a, holder, base, m, own)
        copy = None if why else _rewritten_copy(a, m)
        if copy is None:
            if _abstract(base):
                continue  # no instance of the base alone: its method may read `self.<scaler>`
            return m, (f"`{base.name.value}.{m.name.value}` needs the scaler, which only `{holder.name.value}` "
                       f"objects hold (`self.{a.scaler_ref}`), and `{base.name.value}` objects of its own would "
                       f"have none; it cannot be overridden on `{holder.name.value}` "
                       f"({why or 'its edits reach outside it'}): define `{m.name.value}` on "
                       f"`{holder.name.value}` with the scaler's step by hand, then rerun")
        last = holder.body.body[-1]
        a.plan.insert_after(last, [copy.with_changes(leading_lines=[cst.EmptyLine(indent=False)])])
        for f in needing:
            a.user_funcs.discard(f)
        own.add(m.name.value)
        a.report(m, rule_, f"`{base.name.value}.{m.name.value}` steps the amp optimizer for `{holder.name.value}` "
                           f"objects too: `{holder.name.value}` now overrides it with the scaler's step; "
                           f"`{base.name.value}` and its other subclasses keep theirs", fixed=True)
    return None


def _why_not_override(a, holder: cst.ClassDef, base: cst.ClassDef, m: cst.FunctionDef, own: Set[str]) -> str:
    """Why `m` (a method of `base`, an in-module base of `holder`) cannot get a copy on `holder`, or ''."""
    name = m.name.value
    if name in own:
        return f"`{holder.name.value}` defines its own `{name}`"
    if m.decorators:
        return "it is decorated"
    if _reads_super_or_private(m):
        return "it calls `super()` or reads a private `__name`"
    if _super_calls(a, name):
        return f"the module calls `super().{name}()`"
    if _read_through_class(a, base.name.value, name):
        return f"the module reads `{base.name.value}.{name}`"
    if _resolves_to(a, holder, name) is not base:
        return f"`{holder.name.value}` objects may run another class's `{name}` first in their MRO"
    return ""


def _abstract(cls: cst.ClassDef) -> bool:
    """Whether `cls` cannot be instantiated: an abstract method (`@abstractmethod`) under `ABC`/`ABCMeta`."""
    abc = any((dotted_name(b.value) or "").rpartition(".")[2] in ("ABC", "ABCMeta") for b in cls.bases)
    return abc and any(isinstance(s, cst.FunctionDef) and any(
        (dotted_name(d.decorator) or "").rpartition(".")[2] == "abstractmethod" for d in s.decorators)
        for s in cls.body.body)


def _resolves_to(a, holder: cst.ClassDef, name: str) -> Optional[cst.ClassDef]:
    """The class whose `name` `holder` objects run, by the C3 order of the module's classes; None when a
    class before it in that order is not in the module (its methods are unknown) or the order fails."""
    classes = {c.name.value: c for c in a.index.classes if isinstance(a.parent(c), cst.Module)}
    mro = _c3(holder.name.value, amp_threading._bases(a), set(classes), set())
    if mro is None:
        return None
    for n in mro:
        c = classes.get(n)
        if c is None:
            if n in ("object",):
                continue
            return None
        if any(isinstance(s, cst.FunctionDef) and s.name.value == name for s in c.body.body):
            return c
    return None


def _c3(name: str, graph: Dict[str, List[str]], known: Set[str], busy: Set[str]) -> Optional[List[str]]:
    if name not in known or not graph.get(name):
        return [name]
    if name in busy:
        return None
    busy = busy | {name}
    seqs = []
    for b in graph[name]:
        sub = _c3(b, graph, known, busy)
        if sub is None:
            return None
        seqs.append(sub)
    seqs.append(list(graph[name]))
    out = [name]
    while any(seqs):
        seqs = [s for s in seqs if s]
        for s in seqs:
            head = s[0]
            if not any(head in t[1:] for t in seqs):
                break
        else:
            return None
        out.append(head)
        seqs = [t[1:] if t[0] == head else t for t in seqs]
    return out


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
