"""The scaler handed in through the constructor of the class that holds a module's amp code (A2A185).

A trainer class (`class Trainer: def __init__(self, args, model, optimizer, ...)`, its `train_epoch`
holding `amp.scale_loss(loss, self.optimizer)`) whose `amp.initialize` runs in the scripts that build it
(`model, optimizer = amp.initialize(...)`, then `Trainer(model=model, optimizer=optimizer, ...)`): its
`__init__` takes a `scaler` parameter and keeps it on `self`, its methods read `self.scaler`, and the
scripts pass the GradScaler they create where `amp.initialize` ran (its enabled switch stays there).

The constructor is published as a function that now takes the scaler (`RepoFacts.scaler_functions`), so
each `Trainer(...)` of the run gets `scaler=scaler` in pass 2, and a call that could not pass it, or a use
of the class as a value in another file (a subclass, a registry), is told back: the module then stays as
it is (A2A126). Only for one top-level class with its own plain `__init__`, no subclass and no other
reference in its module.
"""
from __future__ import annotations

from typing import Optional

import libcst as cst

from . import amp_rules as R
from . import amp_threading
from .amp_plan_state import parse_stmt
from .signatures import add_param, all_params


def _init_of(cls: cst.ClassDef) -> Optional[cst.FunctionDef]:
    return next((s for s in cls.body.body if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"), None)


def _is_super_init(stmt: cst.CSTNode) -> bool:
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.Expr):
        return False
    call = stmt.body[0].value
    return isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and call.func.attr.value == "__init__"


def _lead(init: cst.FunctionDef) -> int:
    """How many statements open `__init__` before the scaler is kept: its docstring, a `super().__init__()`."""
    body = list(init.body.body)
    i = 0 if init.get_docstring(clean=False) is None else 1
    return i + 1 if i < len(body) and _is_super_init(body[i]) else i


def take_constructor_scaler(a) -> Optional[cst.FunctionDef]:
    """The `__init__` that will take the scaler, when this module's amp code is all in one class's methods
    and its `amp.initialize` is elsewhere (the scaler is then `self.<scaler_ref>`); else None."""
    if not a.use_scaler or not a.ctx.module_name or not a.has_scale_loss or a.scaler_is_attr:
        return None
    classes = amp_threading.candidate_classes(a)  # [] when this module has an amp.initialize
    if len(classes) != 1:
        return None
    name = classes[0]
    cls = next((c for c in a.index.classes if c.name.value == name and isinstance(a.parent(c), cst.Module)), None)
    init = _init_of(cls) if cls is not None else None
    if init is None or init.decorators or not init.body.body or not isinstance(init.body, cst.IndentedBlock):
        return None
    if amp_threading.family(a, name) != {name}:
        return None  # a subclass in this module would build the object without the scaler
    if any(n.value == name and n is not cls.name for n in a.index.names):
        return None  # built or referenced in this module, which has no scaler to pass
    attr = a.scaler_ref
    if attr in a.index.attr_values or any(p.name.value == attr for p in all_params(init)):
        return None
    if amp_threading.constructor_blocked(a, name) is not None:
        return None  # a caller that cannot pass it, or the class used as a value elsewhere (A2A126 then)
    a.scaler_is_attr = True
    return init


def finish_constructor_scaler(a, init: cst.FunctionDef) -> None:
    """Plan `__init__`'s new parameter and `self.<scaler> = <scaler>`, and publish the class as taking it."""
    cls = a.class_of(init)
    name, attr = cls.name.value, a.scaler_ref
    a.plan.transforms[init] = add_param(attr)
    body, lead = list(init.body.body), _lead(init)
    stmt = parse_stmt(f"self.{attr} = {attr}")
    if lead == 0:
        a.plan.insert_before(body[0], [stmt])
    else:
        a.plan.insert_after(body[lead - 1], [stmt])
    a.exported_funcs.append(name)
    a.report(init, R.SCALER_VIA_CONSTRUCTOR, f"`{name}.__init__` now takes the `{attr}` parameter and keeps it on "
                                             f"`self.{attr}`, which its methods use; the calls `{name}(...)` of "
                                             "this run pass the GradScaler made where `amp.initialize` ran, calls "
                                             "from code outside the run must pass it too", fixed=True)
