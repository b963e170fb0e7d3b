"""apex amp stored on an object by one module and used through it in another (argus-style trainers).

    # utils.py                                   # models.py
    def initialize_amp(model, opt_level="O1"):    class Model(Base):
        from apex import amp                          def __init__(self, params):
        model.net, model.optimizer = \\                    self.amp = None
            amp.initialize(model.net, model.optimizer,  def train_step(self, batch):
                           opt_level=opt_level)             pred = self.net(x)
        model.amp = amp                                     loss = self.loss(pred, y)
                                                            if self.amp is not None:
                                                                with self.amp.scale_loss(loss, self.optimizer) as s:
                                                                    s.backward()
                                                            else:
                                                                loss.backward()
                                                            self.optimizer.step()

becomes `model.scaler = torch.amp.GradScaler("cuda", ...)` in the setter (the initialize goes: the model
stays fp32), `self.scaler = torch.amp.GradScaler("cuda", enabled=False)` where the class set the handle
to None, `self.scaler.is_enabled()` for the `self.amp is not None` tests, `self.scaler.scale(loss).backward()`,
`self.scaler.step(self.optimizer); self.scaler.update()`, and an autocast region (enabled=
`self.scaler.is_enabled()`) from the forward (`self.net(...)`) to the loss.

Proven across the run, from the facts each file publishes in pass 1 (`extra[FACT_PREFIX + module]`):
one setter function stores the handle attribute (a name with `amp` in it), one class sets it to None in
`__init__` and uses it only in those shapes, the optimizer attribute is the same on both sides, and no
file of the run reads or stores that attribute otherwise, or spells a `.scaler` attribute. Otherwise
nothing changes and the findings (A2A124 / A2A125, codemods/amp_unresolved.py) say what to do.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import libcst as cst

from .base import FileContext
from .index import ModuleIndex
from .names import ImportTable, dotted_name, literal_string, norm_code

FACT_PREFIX = "amp_object_attr::"
SCALER_ATTR = "scaler"
SETTER_KWARGS = ("opt_level", "keep_batchnorm_fp32", "loss_scale", "verbosity")
TORCH_AMP_RECEIVERS = ("torch", "torch.cuda", "torch.cpu", "apex")


def _handle_attr(name: str) -> bool:
    """`amp`, `amp_handle`, `apex_amp`: an attribute named for amp (not `num_samples`, not `clamp`)."""
    return "amp" in name.lower().split("_")


def _self_attr(node: cst.CSTNode, attr: Optional[str] = None) -> Optional[str]:
    """`attr` of `self.attr` (any attr when None), else None."""
    if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self":
        if attr is None or node.attr.value == attr:
            return node.attr.value
    return None


def _only(stmt: cst.BaseStatement) -> Optional[cst.BaseSmallStatement]:
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        return stmt.body[0]
    return None


# -- the setter: `P.net, P.opt = amp.initialize(P.net, P.opt, ...)` + `P.amp = amp` -----------------------

class Setter:
    """A module-level function that initializes apex amp on its parameter's members and stores amp on it."""

    def __init__(self, func: cst.FunctionDef, param: str, attr: str, model: str, optimizer: str,
                 init_stmt: cst.BaseStatement, init_call: cst.Call, store_stmt: cst.BaseStatement):
        self.func, self.param, self.attr, self.model, self.optimizer = func, param, attr, model, optimizer
        self.init_stmt, self.init_call, self.store_stmt = init_stmt, init_call, store_stmt


def find_setter(index: ModuleIndex, table: ImportTable) -> Optional[Setter]:
    """The module's one setter (see the module docstring), or None."""
    found: List[Setter] = []
    for func in index.functions:
        if index.enclosing_function(func) is not None or not isinstance(index.parent(func), cst.Module):
            continue
        params = [p.name.value for p in func.params.params]
        if not params or not isinstance(func.body, cst.IndentedBlock):
            continue
        param = params[0]
        store = init = None
        for stmt in func.body.body:
            small = _only(stmt)
            if isinstance(small, cst.Assign) and len(small.targets) == 1:
                t, v = small.targets[0].target, small.value
                if isinstance(t, cst.Attribute) and dotted_name(t.value) == param and _handle_attr(t.attr.value) \
                        and isinstance(v, cst.Name) and "apex.amp" in table.qualified_names(v):
                    store = (stmt, t.attr.value)
                elif isinstance(v, cst.Call) and "apex.amp.initialize" in table.qualified_names(v.func):
                    init = (stmt, small, v)
        if store is None or init is None:
            continue
        stmt, small, call = init
        target = small.targets[0].target
        if not isinstance(target, cst.Tuple) or len(target.elements) != 2 or len(call.args) < 2 or \
                any(a.keyword is not None for a in call.args[:2]) or any(a.star for a in call.args):
            continue
        members = []
        for t, a in zip(target.elements, call.args[:2]):
            if norm_code(t.value) != norm_code(a.value) or not isinstance(t.value, cst.Attribute) or \
                    dotted_name(t.value.value) != param:
                break
            members.append(t.value.attr.value)
        if len(members) != 2:
            continue
        if any(a.keyword is None or a.keyword.value not in SETTER_KWARGS for a in call.args[2:]):
            continue
        found.append(Setter(func, param, store[1], members[0], members[1], stmt, call, store[0]))
    return found[0] if len(found) == 1 else None


# -- the user: a class that sets `self.amp = None` and calls `self.amp.scale_loss` ------------------------

class User:
    """The class that keeps the handle: its None binding, tests, scaled backwards and optimizer steps."""

    def __init__(self, cls: cst.ClassDef, attr: str, optimizer: str):
        self.cls, self.attr, self.optimizer = cls, attr, optimizer
        self.none_stmt: Optional[cst.BaseStatement] = None
        self.tests: List[Tuple[cst.Comparison, bool]] = []  # (test, is-not-None)
        self.withs: List[Tuple[cst.With, cst.BaseExpression]] = []  # (with, loss)
        self.steps: List[cst.BaseStatement] = []


def _parsed_args(index: ModuleIndex) -> set:
    """ids of the functions' local names bound only by `name = <parser>.parse_args(...)` there (an
    argparse namespace: its `.amp` is a command-line flag, never the handle)."""
    good: Dict[Tuple[int, str], bool] = {}
    for node in index.names:
        p = index.parent(node)
        func = index.enclosing_function(node)
        if func is None:
            continue
        key = (id(func), node.value)
        if isinstance(p, cst.AssignTarget) and p.target is node:
            small = index.parent(p)
            v = small.value if isinstance(small, cst.Assign) else None
            ok = isinstance(v, cst.Call) and isinstance(v.func, cst.Attribute) and v.func.attr.value == "parse_args"
            good[key] = good.get(key, True) and ok
        elif isinstance(p, (cst.Param, cst.For, cst.AsName, cst.NamedExpr, cst.Global, cst.Nonlocal)) or \
                isinstance(p, (cst.Element, cst.StarredElement)) and isinstance(index.parent(index.parent(p)), cst.AssignTarget):
            good[key] = False
    return {k for k, ok in good.items() if ok}


def _handle_nodes(index: ModuleIndex) -> Dict[str, List[cst.Attribute]]:
    """attr -> its `.attr` nodes, for the attributes that may hold the handle (not torch's `amp`
    modules, not an argparse namespace's `--amp` flag)."""
    out: Dict[str, List[cst.Attribute]] = {}
    parsed = None
    for node in index.attributes:
        if _handle_attr(node.attr.value) and (dotted_name(node.value) or "") not in TORCH_AMP_RECEIVERS:
            if isinstance(node.value, cst.Name):
                parsed = _parsed_args(index) if parsed is None else parsed
                func = index.enclosing_function(node)
                if func is not None and (id(func), node.value.value) in parsed:
                    continue
            out.setdefault(node.attr.value, []).append(node)
    return out


def find_user(index: ModuleIndex, attr: str, nodes: Sequence[cst.Attribute]) -> Optional[User]:
    """The class whose every `.attr` of this module is one of the user shapes, or None."""
    classes = {id(c) for c in index.classes}
    owner: Optional[cst.ClassDef] = None
    user: Optional[User] = None
    for node in nodes:
        if _self_attr(node, attr) is None:
            return None
        func = index.enclosing_function(node)
        cls = index.parent(index.parent(func)) if func is not None else None
        if cls is None or id(cls) not in classes:
            return None
        if owner is None:
            owner = cls
            user = User(cls, attr, "")
        elif cls is not owner:
            return None
        assert user is not None
        p = index.parent(node)
        if isinstance(p, cst.AssignTarget):
            stmt = index.parent(index.parent(p))
            small = index.parent(p)
            if func.name.value != "__init__" or user.none_stmt is not None or \
                    not isinstance(small, cst.Assign) or len(small.targets) != 1 or \
                    not (isinstance(small.value, cst.Name) and small.value.value == "None") or \
                    index.parent(stmt) is not func.body:
                return None
            user.none_stmt = stmt
        elif isinstance(p, cst.Comparison) and p.left is node and len(p.comparisons) == 1 and \
                isinstance(p.comparisons[0].comparator, cst.Name) and p.comparisons[0].comparator.value == "None" \
                and isinstance(p.comparisons[0].operator, (cst.Is, cst.IsNot)) and \
                isinstance(index.parent(p), cst.If) and index.parent(p).test is p:
            user.tests.append((p, isinstance(p.comparisons[0].operator, cst.IsNot)))
        elif isinstance(p, cst.Attribute) and p.attr.value == "scale_loss":
            call = index.parent(p)
            item = index.parent(call) if isinstance(call, cst.Call) else None
            w = index.parent(item) if isinstance(item, cst.WithItem) else None
            if not isinstance(w, cst.With) or len(w.items) != 1 or item.asname is None or \
                    not isinstance(item.asname.name, cst.Name) or len(call.args) < 2 or \
                    any(a.keyword is not None and a.keyword.value != "delay_unscale" for a in call.args[2:]) or \
                    any(a.keyword is not None or a.star for a in call.args[:2]) or \
                    not isinstance(call.args[0].value, cst.Name):
                return None
            opt = _self_attr(call.args[1].value)
            body = w.body.body if isinstance(w.body, cst.IndentedBlock) else ()
            small = _only(body[0]) if len(body) == 1 else None
            scaled = item.asname.name.value
            if opt is None or (user.optimizer and opt != user.optimizer) or not isinstance(small, cst.Expr) or \
                    not isinstance(small.value, cst.Call) or small.value.args or \
                    not isinstance(small.value.func, cst.Attribute) or small.value.func.attr.value != "backward" or \
                    not (isinstance(small.value.func.value, cst.Name) and small.value.func.value.value == scaled):
                return None
            user.optimizer = opt
            user.withs.append((w, call.args[0].value))
        else:
            return None
    if user is None or user.none_stmt is None or not user.withs:
        return None
    for node in index.attributes:  # `self.optimizer.step()` statements of the class
        if node.attr.value == "step" and _self_attr(node.value, user.optimizer) is not None:
            call = index.parent(node)
            expr = index.parent(call)
            stmt = index.parent(expr)
            if not (isinstance(call, cst.Call) and not call.args and isinstance(expr, cst.Expr) and
                    isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
                return None
            user.steps.append(stmt)
    return user if user.steps else None


# -- pass 1: what each file publishes ---------------------------------------------------------------------

def publish(index: ModuleIndex, table: ImportTable, ctx: FileContext) -> None:
    """This file's setter, user class and other uses of handle-like attributes (and of `.scaler`)."""
    if not ctx.module_name:
        return
    setter = find_setter(index, table)
    nodes = _handle_nodes(index)
    fact: Dict[str, object] = {"setters": [], "users": [], "others": [],
                               "scaler": SCALER_ATTR in index.attr_values}
    explained: set = set()
    if setter is not None:
        fact["setters"] = [[setter.attr, setter.model, setter.optimizer]]
        store = _only(setter.store_stmt)
        explained.add(id(store.targets[0].target))  # type: ignore[union-attr]
    for attr, found in sorted(nodes.items()):
        rest = [n for n in found if id(n) not in explained]
        if not rest:
            continue
        user = find_user(index, attr, rest)
        if user is not None:
            fact["users"].append([attr, user.cls.name.value, user.optimizer])  # type: ignore[union-attr]
        else:
            fact["others"].append(attr)  # type: ignore[union-attr]
    for s in index.strings:  # getattr(obj, "amp") and the like
        value = literal_string(s)
        if value is not None and value.isidentifier() and _handle_attr(value):
            fact["others"].append(value)  # type: ignore[union-attr]
    if fact["setters"] or fact["users"] or fact["others"] or fact["scaler"]:
        ctx.exported.extra[FACT_PREFIX + ctx.module_name + "::" + ctx.path] = fact


def proven(ctx: FileContext, attr: str) -> Optional[Tuple[str, str]]:
    """(model attribute, optimizer attribute) when the run holds exactly one setter and one user class of
    `attr`, agreeing on the optimizer, and no other use of `attr` nor any `.scaler`; else None."""
    setters: List[List[str]] = []
    users: List[List[str]] = []
    for key, fact in ctx.facts.extra.items():
        if not str(key).startswith(FACT_PREFIX):
            continue
        if attr in fact.get("others", ()) or fact.get("scaler"):
            return None
        setters += [s for s in fact.get("setters", ()) if s[0] == attr]
        users += [u for u in fact.get("users", ()) if u[0] == attr]
    if len(setters) != 1 or len(users) != 1 or setters[0][2] != users[0][2]:
        return None
    return setters[0][1], setters[0][2]


def needles(extra: Dict[str, object]) -> List[bytes]:
    """`.attr` for each handle attribute a pass-1 fact names a setter or user of: a file that holds a
    setter or user spells one (and then needs pass 2)."""
    attrs = {s[0] for key, fact in extra.items() if str(key).startswith(FACT_PREFIX)
             for s in list(fact.get("setters", ())) + list(fact.get("users", ()))}  # type: ignore[union-attr]
    return sorted(("." + a).encode() for a in attrs)


def mentions(data: bytes, extra: Dict[str, object]) -> bool:
    """Whether a file with these bytes may hold a setter or user a pass-1 fact names."""
    return any(n in data for n in needles(extra))
