"""Models and optimizers held by name on the object: `amp.initialize` into locals a method then stores on
`self` (`models, optimizers = amp.initialize([getattr(self, n) for n in self.MODEL_NAMES], ...)`, then
`for name, model in zip(self.MODEL_NAMES, models): setattr(self, name, model)` and `self.optimizers =
{k: o for k, o in zip(names, optimizers)}`). The amp state lives on the object, so the scaler does too
(`self.scaler`), as it does when the call assigns `self.<attr>` directly."""
from __future__ import annotations

from typing import List, Optional

import libcst as cst

from .names import assigned_names, dotted_name, names_read
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
