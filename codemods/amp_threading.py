"""Threading the GradScaler without breaking callers (A2A126, A2A127, A2A128).

The scaler reaches code by the binding that already reaches it: the enclosing function (a closure),
the object (`self.<attr>` where amp's results were kept on `self`, shared by the class's methods,
bases and mixins), and only then a new parameter, and only when every call site is found in the run
and updated. A function used as a value (a callback, a hook, `functools.partial`, a registry, a
registering decorator) keeps its signature. These helpers read an amp `_Analysis` (codemods/amp.py).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from .base import RepoFacts, facts_key
from .names import dotted_name
from .walk import iter_nodes


def constructor_blocked(a, name: str) -> Optional[str]:
    """Where another file of the run builds class `name` without a scaler to pass, or uses it as a value
    (a subclass, a registry), as `path:line`; None when nothing was told."""
    key = facts_key(a.ctx.path, a.ctx.module_name)
    facts = a.ctx.facts
    for kind, refs in (("builds", facts.held_callers.get(key, ())), ("uses", facts.foreign_value_refs.get(key, ()))):
        for ref in refs:
            ref_name, _, where = ref.partition(" ")
            if ref_name == name:
                return f"{where} {kind} `{name}`" + (" where no scaler can be passed" if kind == "builds" else
                                                      " as a value (a subclass, a registry)")
    return None


Refusal = Tuple[cst.CSTNode, str]


def outer_method(a, f: Optional[cst.FunctionDef]) -> Optional[Tuple[cst.FunctionDef, cst.ClassDef]]:
    """The method holding `f` (`f` itself or a function around it) and its class, or None."""
    cur = f
    while cur is not None:
        cls = a.class_of(cur)
        if cls is not None:
            return cur, cls
        cur = a.func_of(cur)
    return None


def _bases(a) -> Dict[str, List[str]]:
    """Class name -> the last components of its base names, for the classes of the module."""
    out: Dict[str, List[str]] = {}
    for c in a.index.classes:
        out.setdefault(c.name.value, []).extend(
            (dotted_name(b.value) or "").rpartition(".")[2] for b in c.bases if b.keyword is None)
    return out


def _closure(graph: Dict[str, List[str]], start: str, up: bool) -> Set[str]:
    seen: Set[str] = set()
    todo = [start]
    while todo:
        cur = todo.pop()
        nxt = graph.get(cur, []) if up else [n for n, bs in graph.items() if cur in bs]
        for n in nxt:
            if n not in seen and n != start:
                seen.add(n)
                todo.append(n)
    return seen


def family(a, name: str) -> Set[str]:
    """`name` and its subclasses in the module (the classes whose `self` is a `name`)."""
    return {name} | _closure(_bases(a), name, up=False)


def holder_classes(a, holder: str) -> Set[str]:
    """The classes of the module whose methods may read `self.<scaler>` of a `holder` object: the holder,
    its subclasses, and its bases whose every subclass in the module is one of those or a base too."""
    graph = _bases(a)
    mine = {holder} | _closure(graph, holder, up=False)
    ups = _closure(graph, holder, up=True)
    ok = mine | ups
    return mine | {b for b in ups if _closure(graph, b, up=False) <= ok}


def check_holder_reach(a) -> Optional[Refusal]:
    """With the scaler on `self`, every function that needs it must be a method of the holder's family."""
    held = outer_method(a, a.init_func)
    if held is None:
        return None
    holder = held[1].name.value
    allowed = holder_classes(a, holder)
    for f in sorted((u for u in a.user_funcs if u is not None), key=lambda u: a.ctx.line_of(u)):
        om = outer_method(a, f)
        if om is None or om[1].name.value not in allowed:
            return f, (f"`{f.name.value}` needs the scaler, which lives on `{holder}` objects "
                       f"(`self.{a.scaler_ref}`), but it is not a method of `{holder}`, its subclasses or its "
                       f"bases: pass the scaler from a `{holder}` object by hand, then rerun")
    return None


def _is_call_func(a, node: cst.CSTNode) -> bool:
    p = a.parent(node)
    return isinstance(p, cst.Call) and p.func is node


def _hydra_entry(a, f: cst.FunctionDef) -> bool:
    """Whether `f` is decorated with `hydra.main` (hydra calls it with the composed config alone)."""
    for d in f.decorators:
        expr = d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator
        if "hydra.main" in a.table.qualified_names(expr):
            return True
    return False


def value_use(a, f: cst.FunctionDef) -> Optional[Refusal]:
    """A use of `f` other than a direct call: a decorator (registers it), or its name read as a value
    (`Engine(update)`, `partial(step_fn, ...)`, `hooks["step"] = step_fn`)."""
    name = f.name.value
    if _hydra_entry(a, f):
        return f, (f"`{name}` is the entry point `@hydra.main` calls with the composed config alone, so no caller "
                   "can pass it the scaler: create the `GradScaler` where `amp.initialize` ran (with its "
                   "enabled switch) and hand it to the training step from there (returned with the model and "
                   "optimizer, or kept on the trainer) by hand, then rerun")
    if f.decorators:
        return f, (f"`{name}` is decorated, so it may be registered and called with fixed arguments "
                   "(a callback): its signature cannot take the scaler")
    if a.class_of(f) is None and a.func_of(f) is None:
        key = facts_key(a.ctx.path, a.ctx.module_name)
        where = [ref.partition(" ")[2] for ref in a.ctx.facts.foreign_value_refs.get(key, ())
                 if ref.partition(" ")[0] == name]
        held = [ref.partition(" ")[2] for ref in a.ctx.facts.held_callers.get(key, ())
                if ref.partition(" ")[0] == name]
        if held:
            return f, (f"`{name}` needs the scaler, but {held[0]} calls it from a module that keeps its apex code "
                       "(or has no scaler to pass), so that call could not pass the scaler: the files of one "
                       "migration migrate together, so its signature stays; migrate that caller first (see "
                       "its findings), then rerun")
        if where:
            return f, (f"`{name}` needs the scaler, but {where[0]} uses it as a value (a callback, "
                       "`functools.partial`, a registry), so its callers are not in this run's reach: its "
                       "signature cannot take the scaler; create the scaler where it is called, or pass it "
                       "in the partial, by hand, then rerun")
    for n in a.index.names:
        if n.value != name or n is f.name:
            continue
        p = a.parent(n)
        if isinstance(p, cst.Attribute) and p.attr is n or isinstance(p, cst.Arg) and p.keyword is n or \
                isinstance(p, (cst.Param, cst.FunctionDef, cst.ClassDef, cst.ImportAlias, cst.AsName)):
            continue
        if isinstance(p, cst.Call) and p.func is n:
            continue
        if a.class_of(f) is not None and a.func_of(n) is not None:
            continue  # inside a function, a bare name never refers to a method
        return n, (f"`{name}` is passed as a value (a callback, `functools.partial`, a registry), so its "
                   "callers are not in this run's reach: its signature cannot take the scaler")
    return None


def _instance_var(a, call: cst.Call, classes: Set[str]) -> bool:
    """Whether the receiver of `call` (`v.m(...)`) is `C(...)` or a name its function binds only by
    `v = C(...)`, C one of `classes`."""
    recv = call.func.value  # type: ignore[attr-defined]
    if isinstance(recv, cst.Call):
        return (dotted_name(recv.func) or "") in classes
    g = a.func_of(call)
    if not isinstance(recv, cst.Name) or g is None:
        return False
    v = recv.value
    found = False
    for n in iter_nodes(g):
        if isinstance(n, cst.Assign) and any(isinstance(t.target, cst.Name) and t.target.value == v
                                             for t in n.targets):
            if not (isinstance(n.value, cst.Call) and (dotted_name(n.value.func) or "") in classes):
                return False
            found = True
        elif isinstance(n, (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.For, cst.WithItem, cst.NamedExpr,
                            cst.Param, cst.CompFor, cst.ExceptHandler, cst.Global, cst.Nonlocal)):
            bound = [getattr(n, k) for k in ("target", "name", "asname", "names") if getattr(n, k, None) is not None]
            bound += [t.target for t in getattr(n, "targets", ())]
            if any(isinstance(x, cst.Name) and x.value == v for b in bound
                   for x in (iter_nodes(b) if isinstance(b, cst.CSTNode) else ())):
                return False
    return found


def cannot_bind(call: cst.Call, f: cst.FunctionDef) -> bool:
    """Whether the arguments of `call` (`v.m(...)`, no `*`/`**`) cannot bind to method `f` (a plain method:
    `self` first, no decorator): too few or too many positionals, or an unknown keyword. Such a call never
    reaches `f` without a TypeError, before the migration as after: it calls another object's `m` (the
    model's `train()` beside the trainer's `def train(self, data)`)."""
    if f.decorators or any(arg.star for arg in call.args):
        return False
    p = f.params
    plain = list(p.posonly_params) + list(p.params)
    if not plain or plain[0].name.value != "self":
        return False
    plain = plain[1:]
    positional = [arg for arg in call.args if arg.keyword is None]
    keywords = [arg.keyword.value for arg in call.args if arg.keyword is not None]
    named = {q.name.value for q in list(p.params) + list(p.kwonly_params)}
    if not isinstance(p.star_arg, cst.Param) and len(positional) > len(plain):
        return True
    if p.star_kwarg is None and any(k not in named for k in keywords):
        return True
    filled = {q.name.value for q in plain[:len(positional)]} | set(keywords)
    required = [q.name.value for q in plain + list(p.kwonly_params) if q.default is None]
    return any(r not in filled for r in required)


def method_call_sites(a, f: cst.FunctionDef) -> Tuple[List[cst.Call], Optional[Refusal]]:
    """The calls of method `f` that can pass the scaler (`self.f(...)` in its class's family, `v.f(...)`
    where `v = C(...)` in the same function), or a refusal: another reference of `.f` in the run (on any
    receiver, a value, another file), or no call at all."""
    cls = a.class_of(f)
    name = f.name.value
    classes = family(a, cls.name.value)
    key = facts_key(a.ctx.path, a.ctx.module_name)
    if name in a.ctx.facts.foreign_method_refs.get(key, ()):
        return [], (f, f"method `{cls.name.value}.{name}` needs the scaler, but another file of this run "
                       f"references `.{name}` (a call on an instance, or a value): a new parameter would break "
                       f"it; keep the scaler on the object (`self.{a.scaler_ref}`, set in `__init__`) by hand, "
                       "then rerun")
    sites: List[cst.Call] = []
    for attr in a.index.attributes:
        if attr.attr.value != name:
            continue
        spelled = a.module.code_for_node(attr)
        if not _is_call_func(a, attr):
            return [], (attr, f"`{spelled}` uses method `{cls.name.value}.{name}` as a value: its callers "
                              "cannot be updated, so its signature cannot take the scaler")
        call = a.parent(attr)
        recv = attr.value
        om = outer_method(a, a.func_of(call))
        if isinstance(recv, cst.Name) and recv.value == "self" and om is not None and om[1].name.value in classes:
            sites.append(call)
        elif _instance_var(a, call, classes):
            sites.append(call)
        elif cannot_bind(call, f):
            continue  # `self.model.train()` for `def train(self, data)`: not a call of this method
        else:
            return [], (call, f"`{spelled}(...)` may call method `{cls.name.value}.{name}` on an object this "
                              "module cannot prove, so not every caller can pass the scaler: keep the scaler on "
                              f"the object (`self.{a.scaler_ref}`) by hand, then rerun")
    blocked = constructor_blocked(a, cls.name.value) if not sites else None
    if blocked is not None:
        return [], (f, f"method `{cls.name.value}.{name}` needs the scaler, which `{cls.name.value}.__init__` "
                       f"could take (A2A185), but {blocked}: its signature stays; migrate that code first "
                       "(see its findings), or keep the scaler on the object by hand, then rerun")
    if not sites:
        return [], (f, f"method `{cls.name.value}.{name}` needs the scaler, but nothing in this run calls it, so "
                       "its callers cannot be updated: keep the scaler on the object (`self."
                       f"{a.scaler_ref}`, set where the model and optimizer are) by hand, then rerun")
    return sites, None


# -- a mixin or base class of a class that holds the scaler on `self` (cross-module) --------------

def candidate_classes(a) -> List[str]:
    """The module's top-level classes whose methods hold every amp site, when the module has no
    `amp.initialize` (a mixin or base whose subclass elsewhere may hold the scaler), else []."""
    if not a.ctx.module_name or any(s.kind == "initialize" for s in a.sites):
        return []
    out: List[str] = []
    for s in a.sites:
        om = outer_method(a, s.func)
        if om is None or not isinstance(a.parent(om[1]), cst.Module):
            return []
        if om[1].name.value not in out:
            out.append(om[1].name.value)
    return out


def rescued(facts: RepoFacts, module: str) -> Optional[str]:
    """The scaler attribute the subclasses in the run keep on `self` when every candidate class of
    `module` is a base of such a subclass (its amp code then reads `self.<attr>`), else None."""
    cands = facts.attr_candidates.get(module) or []
    attrs = {facts.scaler_bases.get(f"{module}.{c}") for c in cands}
    if not cands or len(attrs) != 1 or None in attrs:
        return None
    return attrs.pop()


def published_bases(a) -> Dict[str, str]:
    """Qualified names of the imported bases (and theirs in the module) of the class that holds the
    scaler on `self`, each with the scaler's attribute name."""
    held = outer_method(a, a.init_func)
    if held is None:
        return {}
    names = {held[1].name.value} | _closure(_bases(a), held[1].name.value, up=True)
    out: Dict[str, str] = {}
    for c in a.index.classes:
        if c.name.value not in names:
            continue
        for b in c.bases:
            if b.keyword is None:
                for q in a.table.qualified_names(b.value):
                    if "." in q:
                        out[q] = a.scaler_ref
    return out
