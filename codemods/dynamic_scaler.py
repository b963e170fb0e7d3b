"""Hand-written dynamic loss scalers (2018-era NLP toolkits): the class and its GradScaler settings.

Recognised: a class whose `__init__` keeps an initial scale, a factor and a window in attributes, and
one of whose methods, given an overflow flag, divides the scale by the factor on overflow and multiplies
it by the factor after `window` clean iterations (`% self.scale_window == 0`, or a counter compared with
it). Each instantiation then maps to `GradScaler(init_scale=S, growth_factor=F, backoff_factor=1/F,
growth_interval=W)`; the values come from the call's arguments, else the parameters' defaults.

`scalers(module)` finds such classes and their instantiations; `mapping(...)` writes the GradScaler call.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import libcst as cst

from .base import WARNING, rule
from .names import code_of, dotted_name, literal_number
from .walk import iter_nodes

DYNAMIC_SCALER = rule(
    "A2A146", "hand-written-dynamic-loss-scaler",
    "hand-written dynamic loss scaler class -> `torch.amp.GradScaler(init_scale, growth_factor, backoff_factor, "
    "growth_interval)`", fixes=False, severity=WARNING,
    why="""
A class that halves the loss scale on overflow and doubles it after N clean iterations (the
`DynamicLossScaler` of 2018-era NLP toolkits, used with an fp16 model and fp32 master copies) is what
`torch.amp.GradScaler` does: `init_scale` = the initial scale, `growth_factor` = the factor,
`backoff_factor` = 1 / the factor, `growth_interval` = the window. GradScaler also skips the step on
inf/NaN gradients (the overflow check), unscales before `scaler.step`, and needs no master copies: keep
the model fp32 and run forward + loss under `torch.autocast`. The finding names the GradScaler call with
this instance's values (a computed window as `int(window)`: GradScaler takes an int); a scaler that keeps
its scale above a floor on overflow (`max(scale / factor, 1)`) gets the line that keeps it, since
GradScaler has none: `if scaler.get_scale() < 1: scaler.update(1.0)` after `scaler.update()`. Migrate
the training step by hand (A2A509 / A2A508 list the other sites).""",
    before="""
scaler = DynamicLossScaler(init_scale=2 ** 16, scale_window=1000)
(loss * scaler.loss_scale).backward()
overflow = DynamicLossScaler.has_overflow(params)
scaler.update_scale(overflow)""",
    after="""
scaler = torch.amp.GradScaler("cuda", init_scale=2 ** 16, growth_factor=2.0, backoff_factor=0.5,
                              growth_interval=1000)
scaler.scale(loss).backward()
scaler.step(optimizer)
scaler.update()""")

CODES = ("A2A146",)


@dataclass
class ScalerClass:
    """A recognised dynamic loss scaler: the `__init__` parameter feeding each setting, and its default."""

    name: str
    scale_attr: str
    params: List[str] = field(default_factory=list)  # __init__ parameters after self, in order
    defaults: Dict[str, Optional[cst.BaseExpression]] = field(default_factory=dict)
    setting: Dict[str, str] = field(default_factory=dict)  # "init" / "factor" / "window" / "floor" -> parameter
    floor: Optional[str] = None  # the code of a literal floor on overflow (`max(self.s / self.f, 1)`)


def _self_attr(node: cst.CSTNode) -> Optional[str]:
    d = dotted_name(node) if isinstance(node, cst.BaseExpression) else None
    return d[5:] if d and d.startswith("self.") and d.count(".") == 1 else None


def _init_attrs(init: cst.FunctionDef) -> Dict[str, str]:
    """self.<attr> -> the `__init__` parameter it is set from (`self.loss_scale = init_scale`)."""
    out: Dict[str, str] = {}
    names = {p.name.value for p in init.params.params}
    for n in iter_nodes(init.body):
        if isinstance(n, cst.Assign) and len(n.targets) == 1 and isinstance(n.value, cst.Name) and \
                n.value.value in names:
            a = _self_attr(n.targets[0].target)
            if a:
                out[a] = n.value.value
    return out


def _scales(n: cst.CSTNode, attr: str, op: type) -> Optional[str]:
    """The self attribute `self.<attr>` is multiplied (op=Multiply) / divided by, in `n`."""
    if isinstance(n, cst.AugAssign) and _self_attr(n.target) == attr:
        inplace = cst.MultiplyAssign if op is cst.Multiply else cst.DivideAssign
        if isinstance(n.operator, inplace):
            return _self_attr(n.value)
    if isinstance(n, cst.Assign) and len(n.targets) == 1 and _self_attr(n.targets[0].target) == attr:
        for b in iter_nodes(n.value):
            if isinstance(b, cst.BinaryOperation) and isinstance(b.operator, op) and _self_attr(b.left) == attr:
                return _self_attr(b.right)
    return None


def _floor(branch: cst.CSTNode, attr: str) -> Optional[cst.BaseExpression]:
    """The other argument of `self.<attr> = max(self.<attr> / ..., FLOOR)` in the overflow branch."""
    for n in iter_nodes(branch):
        if isinstance(n, cst.Assign) and len(n.targets) == 1 and _self_attr(n.targets[0].target) == attr and \
                isinstance(n.value, cst.Call) and isinstance(n.value.func, cst.Name) and \
                n.value.func.value == "max" and len(n.value.args) == 2 and not any(a.star for a in n.value.args):
            a, b = (x.value for x in n.value.args)
            for div, other in ((a, b), (b, a)):
                if isinstance(div, cst.BinaryOperation) and isinstance(div.operator, cst.Divide) and \
                        _self_attr(div.left) == attr:
                    return other
    return None


def _recognise(cls: cst.ClassDef) -> Optional[ScalerClass]:
    methods = {s.name.value: s for s in cls.body.body if isinstance(s, cst.FunctionDef)}
    init = methods.get("__init__")
    if init is None:
        return None
    attrs = _init_attrs(init)
    for meth in methods.values():
        if meth is init or len(meth.params.params) < 2:
            continue
        flag = meth.params.params[1].name.value
        for n in iter_nodes(meth.body):
            if not (isinstance(n, cst.If) and isinstance(n.test, cst.Name) and n.test.value == flag):
                continue
            for scale in attrs:
                down = next((f for s in iter_nodes(n.body) if (f := _scales(s, scale, cst.Divide))), None)
                if down is None or n.orelse is None:
                    continue
                up = next((f for s in iter_nodes(n.orelse) if (f := _scales(s, scale, cst.Multiply))), None)
                window = _window_attr(n.orelse)
                if up != down or window is None or down not in attrs or window not in attrs:
                    continue
                params = [p.name.value for p in init.params.params][1:]
                defaults = {p.name.value: p.default for p in init.params.params}
                setting = {"init": attrs[scale], "factor": attrs[down], "window": attrs[window]}
                floor, floor_code = _floor(n.body, scale), None
                if floor is not None:
                    if _self_attr(floor) in attrs:
                        setting["floor"] = attrs[_self_attr(floor)]
                    elif isinstance(literal_number(floor), (int, float)):
                        floor_code = code_of(floor)
                    else:
                        floor_code = "?"  # a floor this pass cannot read: the mapping says so
                return ScalerClass(cls.name.value, scale, params, defaults, setting, floor_code)
    return None


def _window_attr(branch: cst.CSTNode) -> Optional[str]:
    """The attribute of `... % self.W == 0` or `... >= self.W` in the growth branch's test."""
    for n in iter_nodes(branch):
        if isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.Modulo) and _self_attr(n.right):
            return _self_attr(n.right)
        if isinstance(n, cst.Comparison):
            for c in n.comparisons:
                if isinstance(c.operator, (cst.GreaterThanEqual, cst.GreaterThan)) and _self_attr(c.comparator):
                    return _self_attr(c.comparator)
    return None


def scalers(module: cst.Module) -> Tuple[Dict[str, ScalerClass], List[Tuple[cst.Call, ScalerClass]]]:
    """The module's dynamic scaler classes (by name) and each call that creates one."""
    classes: Dict[str, ScalerClass] = {}
    for s in module.body:
        if isinstance(s, cst.ClassDef):
            found = _recognise(s)
            if found is not None:
                classes[found.name] = found
    calls: List[Tuple[cst.Call, ScalerClass]] = []
    if classes:
        for n in iter_nodes(module):
            if isinstance(n, cst.Call) and isinstance(n.func, cst.Name) and n.func.value in classes:
                calls.append((n, classes[n.func.value]))
    return classes, calls


def _value(call: cst.Call, sc: ScalerClass, param: str) -> Optional[str]:
    for i, a in enumerate(call.args):
        if a.star:
            return None
        if (a.keyword is not None and a.keyword.value == param) or \
                (a.keyword is None and i < len(sc.params) and sc.params[i] == param):
            return code_of(a.value)
    d = sc.defaults.get(param)
    return code_of(d) if d is not None else None


def mapping(call: cst.Call, sc: ScalerClass, grad_scaler: str = "torch.amp.GradScaler", device: str = "cuda"
            ) -> Optional[str]:
    """The GradScaler call that does what this instantiation did, or None when a value is unknown."""
    init, factor, window = (_value(call, sc, sc.setting[k]) for k in ("init", "factor", "window"))
    if init is None or factor is None or window is None:
        return None
    f = literal_number(cst.parse_expression(factor))
    backoff = repr(1.0 / f) if isinstance(f, (int, float)) and f else f"1 / {factor}"
    if not _int_literal(cst.parse_expression(window)):
        window = f"int({window})"  # GradScaler takes an int window (a computed one is often a float)
    return (f'{grad_scaler}("{device}", init_scale={init}, growth_factor={factor}, backoff_factor={backoff}, '
            f"growth_interval={window})")


def _int_literal(node: cst.BaseExpression) -> bool:
    """An integer literal (`1000`, `2 ** 14`, `-3`): no float and no division anywhere in it."""
    v = literal_number(node)
    return v is not None and v == int(v) and not any(
        isinstance(n, (cst.Float, cst.Divide)) for n in iter_nodes(node))


def floor_of(call: cst.Call, sc: ScalerClass) -> Optional[str]:
    """The floor the scaler keeps its scale above on overflow (`max(scale / factor, 1)`), "?" when it has one
    this pass cannot read, else None. GradScaler has none: its scale keeps backing off."""
    if "floor" in sc.setting:
        return _value(call, sc, sc.setting["floor"]) or "?"
    return sc.floor
