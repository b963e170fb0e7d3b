"""Setup helpers in another module (A2A186): `def prepare(net, opt, device, n_gpu, fp16, opt_level)` in
setup_utils.py amp-initializes its model and optimizer parameters under `if fp16:` and returns them; the
trainer of another module calls it (`self.model, self.optimizer = prepare(...)`) and scales / clips /
steps in its methods.

The helper's module (pass 1) drops the `amp.initialize` (and the registrations CUDA autocast already
makes, A2A183) and publishes the helper in the repo facts (`RepoFacts.extra["init_helpers:<module key>"]
= {function: spec}`). A caller module (pass 2) keeps the call and makes the GradScaler right after it,
`enabled=<fp16 argument> and <opt_level argument> != "O0"` (the arguments at the helper's parameter
slots, or its defaults), then migrates its amp code on that scaler as for an `amp.initialize` there.
A caller passing no optimizer gets a finding and no rewrite. The helper drops its `amp.initialize` only
when migrate/helper_groups.py tells it (`CALLED`) that files of the run call it and every one of them
migrates; when a caller keeps its apex code, or none calls it, it is told so (`HELD`) and its
`amp.initialize` stays (A2A124), as it does when rewritten alone: the files migrate together or not
at all.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import libcst as cst

from .names import arg_by, literal_string

PREFIX = "init_helpers:"
HELD = "init_helpers_held:"  # told by migrate/helper_groups.py: a caller keeps its amp code, or none calls it
CALLED = "init_helpers_called:"  # told by migrate/helper_groups.py: called in the run, every caller migrates
_ALLOWED_KWARGS = {"models", "optimizers", "opt_level", "verbosity"}
REGISTRATIONS = ("register_half_function", "register_float_function", "register_promote_function")


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def _returns(func: cst.FunctionDef) -> List[cst.Return]:
    out: List[cst.Return] = []

    class V(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is func

        def visit_Lambda(self, node: cst.Lambda) -> bool:
            return False

        def visit_Return(self, node: cst.Return) -> None:
            out.append(node)

    func.visit(V())
    return out


def _assigned(func: cst.FunctionDef, name: str) -> int:
    """How many statements of `func` bind `name` (assignments, augmented, for targets, with-as, del)."""
    from .names import assigned_names
    count = 0

    class V(cst.CSTVisitor):
        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return node is func

        def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> bool:
            nonlocal count
            if name in assigned_names(node):
                count += 1
            return False

        def visit_For(self, node: cst.For) -> None:
            nonlocal count
            if name in assigned_names(node.target):
                count += 1

        def visit_With(self, node: cst.With) -> None:
            nonlocal count
            for item in node.items:
                if item.asname is not None and name in assigned_names(item.asname.name):
                    count += 1

    func.visit(V())
    return count


def helper_spec(a: Any, init: Any, live: List[Any]) -> Optional[Dict[str, Any]]:
    """The spec of `init`'s function when the module is an init helper (module docstring), else None:
    the module's only amp sites are this `amp.initialize` and registrations autocast already makes; it
    sits in a module-level function, at most under `if <parameter>:`, assigns the model and optimizer
    parameters back (`net, opt = amp.initialize(net, opt, opt_level=<parameter or literal>)`), which
    every return of the function returns as a pair, the optimizer never rebound."""
    from .autocast_policy import autocast_covers
    func = init.func
    if func is None or not isinstance(a.parent(func), cst.Module) or "step" in a.index.attr_values:
        return None
    for s in live:
        if s is init:
            continue
        if s.kind not in REGISTRATIONS or a.device != "cuda":
            return None
        call = s.call
        if len(call.args) != 2 or any(x.keyword is not None or x.star for x in call.args):
            return None
        name = call.args[1].value
        if not isinstance(name, cst.SimpleString) or not isinstance(name.evaluated_value, str):
            return None
        stmt = s.stmt
        if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and
                isinstance(stmt.body[0], cst.Expr) and stmt.body[0].value is call):
            return None
        if not any(autocast_covers(s.kind, m, name.evaluated_value)
                   for m in a.table.qualified_names(call.args[0].value)):
            return None
    ps = func.params
    if not isinstance(ps.star_arg, cst.MaybeSentinel) or ps.star_kwarg is not None or ps.kwonly_params or \
            ps.posonly_params:
        return None
    params = [p.name.value for p in ps.params]
    call, stmt = init.call, init.stmt
    if any(x.star or (x.keyword is not None and x.keyword.value not in _ALLOWED_KWARGS) for x in call.args) or \
            any(x.keyword is None for x in call.args[2:]):
        return None
    models, opts = arg_by(call, 0, "models"), arg_by(call, 1, "optimizers")
    small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
    if models is None or opts is None or not isinstance(small, cst.Assign) or small.value is not call or \
            len(small.targets) != 1 or not isinstance(small.targets[0].target, (cst.Tuple, cst.List)):
        return None
    parts = [e.value for e in small.targets[0].target.elements]
    m, o = models.value, opts.value
    if len(parts) != 2 or not all(isinstance(e, cst.Name) for e in (m, o, *parts)) or \
            [e.value for e in parts] != [m.value, o.value] or m.value == o.value or \
            m.value not in params or o.value not in params:  # type: ignore[union-attr]
        return None
    if _assigned(func, o.value) != 1:  # the optimizer passes through unchanged but for apex's wrap
        return None
    # only `if <parameter>:` between the function and the call
    conds, _ = a.gate_of(stmt)
    cur = a.parent(stmt)
    while cur is not func:
        if not isinstance(cur, (cst.IndentedBlock, cst.If)):
            return None
        cur = a.parent(cur)
    if len(conds) > 1 or (conds and not (isinstance(conds[0], cst.Name) and conds[0].value in params)):
        return None
    rets = _returns(func)
    if not rets:
        return None
    for r in rets:
        v = r.value
        if not isinstance(v, cst.Tuple) or len(v.elements) != 2 or \
                [_code(e.value) for e in v.elements] != [m.value, o.value]:
            return None
    level = arg_by(call, 99, "opt_level")
    spec: Dict[str, Any] = {"params": params, "model": params.index(m.value), "optimizer": params.index(o.value),
                            "fp16": params.index(conds[0].value) if conds else -1,  # type: ignore[attr-defined]
                            "opt_level": -1, "level": "O1", "defaults": {}}
    if level is not None:
        lit = literal_string(level.value)
        if lit is not None:
            spec["level"] = lit
        elif isinstance(level.value, cst.Name) and level.value.value in params:
            spec["opt_level"] = params.index(level.value.value)
            spec["level"] = None
        else:
            return None
    for p in ps.params:
        if p.default is not None:
            spec["defaults"][p.name.value] = _code(p.default)
    return spec


def known(facts: Any) -> Dict[str, Dict[str, Any]]:
    """Qualified `module.function` -> spec of the init helpers the facts publish, `held` True for those
    that keep their `amp.initialize` (not told `CALLED`)."""
    out: Dict[str, Dict[str, Any]] = {}
    for key, fns in facts.extra.items():
        if not str(key).startswith(PREFIX):
            continue
        mkey = str(key)[len(PREFIX):]
        held = not facts.extra.get(CALLED + mkey)
        module = mkey.rpartition("::")[2]
        for fn, spec in (fns or {}).items():
            q = f"{module}.{fn}"
            out[q] = None if q in out else dict(spec, key=mkey, held=held)  # type: ignore[assignment]
    return {q: s for q, s in out.items() if s is not None}


def needles(extra: Dict[str, object]) -> List[bytes]:
    """The helper names a caller's bytes spell."""
    return sorted({fn.encode() for key, fns in extra.items() if str(key).startswith(PREFIX)
                   for fn in (fns or {})})  # type: ignore[union-attr]


def call_arg(call: cst.Call, slot: int, name: str) -> Tuple[bool, Optional[cst.BaseExpression]]:
    """(readable, the argument at parameter `slot` named `name`): readable is False with *args/**kwargs."""
    if any(x.star for x in call.args):
        return False, None
    for x in call.args:
        if x.keyword is not None and x.keyword.value == name:
            return True, x.value
    positional = [x for x in call.args if x.keyword is None]
    return True, positional[slot].value if 0 <= slot < len(positional) else None
