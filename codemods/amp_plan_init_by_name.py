"""Models and optimizers held by name on the object: `amp.initialize` into locals a method then stores on
`self` (`models, optimizers = amp.initialize([getattr(self, n) for n in self.MODEL_NAMES], ...)`, then
`for name, model in zip(self.MODEL_NAMES, models): setattr(self, name, model)` and `self.optimizers =
{k: o for k, o in zip(names, optimizers)}`). The amp state lives on the object, so the scaler does too
(`self.scaler`), as it does when the call assigns `self.<attr>` directly."""
from __future__ import annotations

from typing import List, Optional, Set

import libcst as cst

from .names import assigned_names, dotted_name, literal_string, names_read
from .walk import iter_nodes
from .amp_plan_state import flatten


def stored_on_self(st, stmt: cst.CSTNode, target: Optional[cst.BaseExpression]) -> bool:
    """Whether every name `target` binds is, in a later statement of the same block (and before any
    rebinding of it), stored on `self`: read by the value of a `self.<attr> = ...` assignment, or by the
    iterable of a loop whose body is only `setattr(self, ..., ...)` calls."""
    if target is None:
        return False
    names: List[str] = []
    for part in flatten(target):
        for e in flatten(part) if isinstance(part, (cst.Tuple, cst.List)) else [part]:
            if not isinstance(e, cst.Name):
                return False
            names.append(e.value)
    if not names:
        return False
    parent = st.parent(stmt)
    body = list(getattr(parent, "body", []) or [])
    if stmt not in body:
        return False
    later = body[body.index(stmt) + 1:]
    for name in names:
        ok = False
        for s in later:
            if _stores(s, name):
                ok = True
                break
            if name in assigned_names(s):
                break
        if not ok:
            return False
    return True


def _stores(s: cst.CSTNode, name: str) -> bool:
    if isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1 and isinstance(s.body[0], cst.Assign):
        a = s.body[0]
        return all((dotted_name(t.target) or "").startswith("self.") for t in a.targets) and \
            name in names_read(a.value)
    if isinstance(s, cst.For) and not s.orelse and name in names_read(s.iter) and \
            isinstance(s.body, cst.IndentedBlock) and s.body.body:
        for line in s.body.body:
            if not (isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1 and
                    isinstance(line.body[0], cst.Expr) and isinstance(line.body[0].value, cst.Call)):
                return False
            call = line.body[0].value
            if not (isinstance(call.func, cst.Name) and call.func.value == "setattr" and len(call.args) == 3 and
                    isinstance(call.args[0].value, cst.Name) and call.args[0].value.value == "self"):
                return False
        return True
    return False


def named_models(st, models: cst.BaseExpression, func: Optional[cst.FunctionDef]) -> Set[str]:
    """The models `amp.initialize` was given by name, as the forward passes call them: for
    `[getattr(self, n) for n in self.NAMES]` (directly, or through a local assigned just that in `func`),
    where every assignment of `NAMES` in the module (class body or `self.NAMES = ...`) is a literal list of
    strings: `self.<name>` for each of those strings, and each name `v` of `v = getattr(self, e)` where
    `e` is one of those strings, or a local of its function bound only to them (`name = 'model' if ...
    else 'decoder'`). Empty when the shape is not that."""
    comp = _comprehension(st, models, func)
    if comp is None:
        return set()
    attr = comp[1]
    literals = _literal_names(st, attr)
    if not literals:
        return set()
    out = {f"self.{n}" for n in literals}
    for n in st.index.nodes:
        if type(n) is not cst.Assign or len(n.targets) != 1 or not isinstance(n.targets[0].target, cst.Name):
            continue
        value = n.value
        if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == "getattr"
                and len(value.args) == 2 and isinstance(value.args[0].value, cst.Name) and
                value.args[0].value.value == "self"):
            continue
        key = value.args[1].value
        if _one_of(st, key, literals, st.func_of(n)):
            out.add(n.targets[0].target.value)
    return out


def _comprehension(st, models: cst.BaseExpression, func: Optional[cst.FunctionDef]):
    """(the list comprehension, the `self.<attr>` it iterates) for the models argument, or None."""
    e = models
    if isinstance(e, cst.Name) and func is not None:
        bound = [n for n in iter_nodes(func) if type(n) is cst.Assign and
                 any(isinstance(t.target, cst.Name) and t.target.value == e.value for t in n.targets)]
        if len(bound) < 1:
            return None
        first = bound[0]
        if len(first.targets) != 1:
            return None
        e = first.value
    if not (isinstance(e, cst.ListComp) and e.for_in.inner_for_in is None and not e.for_in.ifs and
            isinstance(e.for_in.target, cst.Name)):
        return None
    elt = e.elt
    it = dotted_name(e.for_in.iter) or ""
    if not (isinstance(elt, cst.Call) and isinstance(elt.func, cst.Name) and elt.func.value == "getattr" and
            len(elt.args) == 2 and isinstance(elt.args[0].value, cst.Name) and elt.args[0].value.value == "self" and
            isinstance(elt.args[1].value, cst.Name) and elt.args[1].value.value == e.for_in.target.value and
            it.startswith("self.") and it.count(".") == 1):
        return None
    return e, it.split(".", 1)[1]


def _literal_names(st, attr: str) -> Set[str]:
    """The strings of every assignment of `attr` (`self.attr = [...]` or `attr = [...]` in a class
    body); empty when one of them is not a literal list or tuple of strings, or when there is none."""
    out: Set[str] = set()
    found = False
    for n in st.index.nodes:
        if type(n) not in (cst.Assign, cst.AugAssign, cst.AnnAssign):
            continue
        targets = [t.target for t in n.targets] if type(n) is cst.Assign else [n.target]
        hit = False
        for t in targets:
            d = dotted_name(t) or ""
            if d == f"self.{attr}":
                hit = True
            elif d == attr and isinstance(st.parent(st.parent(n)), cst.IndentedBlock) and \
                    isinstance(st.parent(st.parent(st.parent(n))), cst.ClassDef):
                hit = True
            elif d.endswith(f".{attr}"):
                return set()  # assigned on another object: not provably the object's own list
        if not hit:
            continue
        if type(n) is not cst.Assign or len(n.targets) != 1:
            return set()
        strings = _strings(n.value)
        if strings is None:
            return set()
        found = True
        out |= strings
    return out if found else set()


def _strings(e: cst.BaseExpression) -> Optional[Set[str]]:
    if not isinstance(e, (cst.List, cst.Tuple)):
        return None
    out: Set[str] = set()
    for el in e.elements:
        s = literal_string(el.value) if isinstance(el.value, cst.SimpleString) else None
        if s is None:
            return None
        out.add(s)
    return out


def _one_of(st, key: cst.BaseExpression, literals: Set[str], func: Optional[cst.FunctionDef]) -> bool:
    if isinstance(key, cst.SimpleString):
        return literal_string(key) in literals
    if not isinstance(key, cst.Name) or func is None:
        return False
    values: List[cst.BaseExpression] = []
    for n in iter_nodes(func):
        if isinstance(n, (cst.For, cst.CompFor)) and \
                key.value in {m.value for m in iter_nodes(n.target) if isinstance(m, cst.Name)}:
            return False
        if type(n) is cst.Assign:
            if any(key.value in {m.value for m in iter_nodes(t.target) if isinstance(m, cst.Name)}
                   for t in n.targets):
                if len(n.targets) != 1 or not isinstance(n.targets[0].target, cst.Name):
                    return False
                values.append(n.value)
        elif type(n) in (cst.AugAssign, cst.AnnAssign) and isinstance(n.target, cst.Name) and \
                n.target.value == key.value:
            return False
    if key.value in {p.name.value for p in func.params.params + func.params.kwonly_params}:
        return False
    if not values:
        return False
    for v in values:
        choices = [v.body, v.orelse] if isinstance(v, cst.IfExp) else [v]
        for c in choices:
            if not (isinstance(c, cst.SimpleString) and literal_string(c) in literals):
                return False
    return True


def gated_caller(st, func: Optional[cst.FunctionDef]) -> Optional[cst.CSTNode]:
    """The gated statement (`if params.amp >= 0: self.init_amp()`) of `__init__` that makes the only
    call of the method `func` in this module, when that call sits under an `if`; None otherwise. Off
    that gate the method never runs, so `self.scaler` would not exist there."""
    if func is None or func.name.value == "__init__":
        return None
    cls = st.class_of(func)
    if cls is None:
        return None
    name = func.name.value
    calls = [c for c in st.index.calls if isinstance(c.func, cst.Attribute) and c.func.attr.value == name]
    refs = [n for n in st.index.attributes if n.attr.value == name]
    if len(calls) != 1 or len(refs) != 1:
        return None
    call = calls[0]
    f = call.func
    caller = st.func_of(call)
    if not (isinstance(f.value, cst.Name) and f.value.value == "self" and caller is not None and
            caller.name.value == "__init__" and st.class_of(caller) is cls):
        return None
    stmt = st.stmt_of(call)
    conds, outer = st.gate_of(stmt)
    return outer if conds and outer is not stmt else None
