"""Whether an `x.update(...)` is a loss scaler's update, which must stay outside an autocast region.

`meter.update(loss.item(), n)`, `stats.update({...})`, `pbar.update(1)` may sit inside a region like any
other statement that neither runs backward nor steps; a GradScaler's `update()` ends the step. The receiver
is resolved first: the scaler the migration creates, a binding from `GradScaler(...)` (any name: `gs =
GradScaler()`) or a `*Scaler` class, or a parameter annotated so, is a scaler; a binding from another class
(`scale_tracker = ScaleTracker()`, a class of this module with no scaler base) or a dict / list / set is
not. A receiver that cannot be resolved is taken for a scaler (its region refused or ended there) unless the
call itself cannot be `GradScaler.update(new_scale=None)`: two or more positional arguments, a keyword other
than `new_scale`, or one argument that is a container or string literal.
"""
from __future__ import annotations

from typing import List, Optional

import libcst as cst

from .names import dotted_name, norm_code
from .signatures import all_params

_LITERALS = (cst.Dict, cst.List, cst.Set, cst.Tuple, cst.DictComp, cst.ListComp, cst.SetComp, cst.SimpleString,
             cst.ConcatenatedString, cst.FormattedString)
_NOT_SCALERS = ("tqdm.", "collections.", "builtins.dict", "dict", "set", "list")


def is_scaler_update(a, call: cst.Call) -> bool:
    """Whether the `.update(...)` call `call` is, or may be, a loss scaler's update."""
    f = call.func
    assert isinstance(f, cst.Attribute)
    kind = _receiver_is_scaler(a, f.value)
    if kind is not None:
        return kind
    if "scal" in norm_code(f.value).lower():
        return True
    positional = [x for x in call.args if x.keyword is None and not x.star]
    if len(positional) >= 2 or any(x.keyword is not None and x.keyword.value != "new_scale" for x in call.args):
        return False
    return not (len(positional) == 1 and isinstance(positional[0].value, _LITERALS))


def _receiver_is_scaler(a, recv: cst.BaseExpression) -> Optional[bool]:
    code = norm_code(recv)
    planned = a.scaler_target()
    if code == planned or code.startswith(planned + "["):
        return True  # the scaler this migration creates
    func = a.func_of(recv)
    if isinstance(recv, cst.Name):
        if func is not None:
            for p in all_params(func):
                if p.name.value == recv.value:
                    return _annotation_is_scaler(a, p.annotation)
        values = _bound_values(a, code, lambda n: a.func_of(n) is func)
        if not values and func is not None:
            values = _bound_values(a, code, lambda n: a.func_of(n) is None)
    elif isinstance(recv, cst.Attribute) and isinstance(recv.value, cst.Name) and recv.value.value == "self":
        cls = a.class_of(func)
        if cls is None:
            return None
        values = _bound_values(a, code, lambda n: a.class_of(a.func_of(n)) is cls)
    else:
        return None
    if not values:
        return None
    kinds = [_value_is_scaler(a, v) for v in values]
    if any(k is True for k in kinds):
        return True
    return False if all(k is False for k in kinds) else None


def _bound_values(a, code: str, keep) -> List[Optional[cst.BaseExpression]]:
    """The values assigned to `code` by the assignments `keep` accepts (None for a binding of another kind)."""
    out: List[Optional[cst.BaseExpression]] = []
    for n in a.index.nodes:
        if type(n) is cst.Assign:
            targets = [t.target for t in n.targets]  # type: ignore[attr-defined]
            if any(norm_code(t) == code for t in targets) and keep(n):
                out.append(n.value if len(targets) == 1 else None)  # type: ignore[attr-defined]
            elif any(code in norm_code(t) for t in targets if isinstance(t, (cst.Tuple, cst.List))) and keep(n):
                out.append(None)  # unpacked: not resolved
        elif type(n) is cst.AnnAssign and norm_code(n.target) == code and keep(n):  # type: ignore[attr-defined]
            if _annotation_is_scaler(a, n.annotation):  # type: ignore[attr-defined]
                out.append(cst.Name("GradScaler"))
            else:
                out.append(n.value)  # type: ignore[attr-defined]
        elif type(n) in (cst.AugAssign, cst.For, cst.WithItem, cst.AsName) and keep(n):
            t = getattr(n, "target", None) or getattr(n, "asname", None) or getattr(n, "name", None)
            if t is not None and isinstance(t, cst.BaseExpression) and norm_code(t) == code:
                out.append(None)
    return out


def _annotation_is_scaler(a, ann: Optional[cst.Annotation]) -> Optional[bool]:
    if ann is None:
        return None
    names = {dotted_name(ann.annotation) or ""} | a.table.qualified_names(ann.annotation)
    return True if any(q.endswith("Scaler") for q in names) else None


def _value_is_scaler(a, value: Optional[cst.BaseExpression]) -> Optional[bool]:
    if value is None:
        return None
    if isinstance(value, cst.Name) and value.value == "GradScaler":
        return True
    if isinstance(value, (cst.Dict, cst.Set, cst.DictComp, cst.SetComp, cst.List)):
        return False
    if not isinstance(value, cst.Call):
        return None
    dotted = dotted_name(value.func) or ""
    names = {dotted} | a.table.qualified_names(value.func)
    last = dotted.rpartition(".")[2]
    if any(q.endswith("Scaler") for q in names):
        return True
    if any(q == p or (p.endswith(".") and q.startswith(p)) for q in names for p in _NOT_SCALERS if q):
        return False
    local = [c for c in a.index.nodes if type(c) is cst.ClassDef and c.name.value == last]  # type: ignore[attr-defined]
    if isinstance(value.func, cst.Name) and len(local) == 1:
        bases = [dotted_name(b.value) or "?" for b in local[0].bases]  # type: ignore[attr-defined]
        return None if any("scal" in b.lower() or b == "?" for b in bases) else False
    return None
