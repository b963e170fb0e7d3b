"""The rewrites of apex amp stored on an object (the shapes and the proof: codemods/amp_object_attr.py).

`HandleOnObject` is the codemod: in pass 1 it publishes each file's setter, user class and other uses
of handle-like attributes; in pass 2 it rewrites the user class of a proven handle. The setter side
runs inside the amp analysis (`plan_setter`, called from codemods/amp.py), whose module imports apex.
"""
from __future__ import annotations

from typing import List, Optional

import libcst as cst

from . import amp_rules as R
from .amp_handle_rules import HANDLE_ON_OBJECT
from .amp_object_attr import SCALER_ATTR, User, _handle_nodes, find_setter, find_user, proven, publish
from .base import Codemod, FileContext
from .code_layout import indent_continuations
from .edits import EditPlan, apply_plan
from .importing import ensure_imports
from .index import ModuleIndex
from .names import ImportTable, literal_number, literal_string
from .amp_plan_state import code_of, parse_expr, parse_stmt


def _scaler_call(ctx: FileContext, args: List[str]) -> str:
    callee = ctx.options.grad_scaler_callee
    head = [] if callee.startswith("torch.cuda.") else [f'"{ctx.options.device}"']
    return f"{callee}({', '.join(head + args)})"


def _calls_member(stmt: cst.CSTNode, index: ModuleIndex, member: str) -> bool:
    return any(isinstance(c.func, cst.Attribute) and c.func.attr.value == member and
               isinstance(c.func.value, cst.Name) and c.func.value.value == "self" for c in index.calls_in(stmt))


def _region(index: ModuleIndex, user: User, w: cst.With, loss: cst.BaseExpression, model: str
            ) -> Optional[List[cst.BaseStatement]]:
    """The statements from the forward (`self.<model>(...)`) to the loss's assignment, in the block that
    holds the scaled backward (or the `if self.amp is not None:` around it)."""
    anchor: cst.CSTNode = w
    tests = {id(t) for t, is_not in user.tests if is_not}
    for a in index.ancestors(w):
        if isinstance(a, cst.If) and id(a.test) in tests:
            anchor = a
            break
        if isinstance(a, (cst.FunctionDef, cst.For, cst.While)):
            break
    block = index.parent(anchor)
    if not isinstance(block, cst.IndentedBlock):
        return None
    body = list(block.body)
    at = next(i for i, s in enumerate(body) if s is anchor)
    name = loss.value  # type: ignore[attr-defined]
    last = next((i for i in range(at - 1, -1, -1) if isinstance(body[i], cst.SimpleStatementLine) and any(
        isinstance(sm, cst.Assign) and any(isinstance(t.target, cst.Name) and t.target.value == name
                                           for t in sm.targets) for sm in body[i].body)), None)
    if last is None:
        return None
    first = next((i for i in range(last + 1) if _calls_member(body[i], index, model)), None)
    if first is None:
        return None
    return body[first:last + 1]


def plan_user(module: cst.Module, ctx: FileContext) -> Optional[cst.Module]:
    """The rewritten module when it holds the user class of a proven handle, else None."""
    if not ctx.options.use_scaler:
        return None
    index = ModuleIndex.of(module)
    for attr, nodes in sorted(_handle_nodes(index).items()):
        user = find_user(index, attr, nodes)
        members = proven(ctx, attr) if user is not None else None
        if user is None or members is None:
            continue
        model, opt = members
        sc = f"self.{SCALER_ATTR}"
        plan = EditPlan()
        regions = []
        for w, loss in user.withs:
            rng = _region(index, user, w, loss, model)
            if rng is None:
                ctx.report(w, R.NO_REGION.code, f"`self.{attr}` is apex amp stored on the object, but no forward "
                                                f"`self.{model}(...)` computes `{code_of(loss)}` next to its scaled "
                                                "backward: migrate by hand (see `apex2amp explain "
                                                f"{HANDLE_ON_OBJECT.code}`)")
                return None
            regions.append(rng)
        plan.replace_stmt[user.none_stmt] = [parse_stmt(f"{sc} = {_scaler_call(ctx, ['enabled=False'])}")]
        for test, is_not in user.tests:
            plan.replace_node[test] = parse_expr(f"{sc}.is_enabled()" if is_not else f"not {sc}.is_enabled()")
        for w, loss in user.withs:
            plan.replace_stmt[w] = [parse_stmt(f"{sc}.scale({code_of(loss)}).backward()")]
        for stmt in user.steps:
            plan.replace_stmt[stmt] = [parse_stmt(f"{sc}.step(self.{opt})"), parse_stmt(f"{sc}.update()")]
        head = parse_expr(f'torch.autocast("{ctx.options.device}", dtype=torch.float16, enabled={sc}.is_enabled())')
        indent = module.default_indent
        for rng in regions:
            def make(stmts: List[cst.BaseStatement], head: cst.BaseExpression = head) -> cst.BaseStatement:
                return cst.With(items=[cst.WithItem(head)],
                                body=cst.IndentedBlock(body=indent_continuations(stmts, indent)))
            plan.wrap(rng[0], rng[-1], make)
        ctx.report(user.none_stmt, HANDLE_ON_OBJECT.code,
                   f"`self.{attr}` (apex amp stored on `{user.cls.name.value}` objects by another module) -> "
                   f"`{sc}`, a GradScaler (disabled until that module stores an enabled one)", fixed=True)
        for rng in regions:
            ctx.report(rng[0], R.AUTOCAST.code, f"forward and loss wrapped in `torch.autocast(\"{ctx.options.device}\", "
                                                f"dtype=torch.float16, enabled={sc}.is_enabled())`", fixed=True)
        for w, _ in user.withs:
            ctx.report(w, R.SCALE_LOSS.code, f"`with self.{attr}.scale_loss(...)` -> `{sc}.scale(loss).backward()` "
                                             "(gradients accumulated over `delay_unscale` steps stay scaled until "
                                             f"`{sc}.step`, as apex kept them)", fixed=True)
        for stmt in user.steps:
            ctx.report(stmt, R.STEP.code, f"`self.{opt}.step()` -> `{sc}.step(self.{opt})` + `{sc}.update()`",
                       fixed=True)
        return ensure_imports(apply_plan(module, plan), ["torch"])
    return None


def plan_setter(a) -> bool:
    """In the amp analysis of the setter's module: drop the initialize, store a GradScaler instead of amp.
    True when planned (the analysis then stops)."""
    if not a.use_scaler or len(a.sites) != 1 or a.sites[0].kind != "initialize":
        return False
    setter = find_setter(a.index, a.table)
    if setter is None or a.sites[0].call is not setter.init_call:
        return False
    members = proven(a.ctx, setter.attr)
    if members is None or members != (setter.model, setter.optimizer):
        return False
    amp_reads = [n for n in a.index.names if n.value in a.table.locals_for("apex.amp")
                 and not isinstance(a.parent(n), (cst.ImportAlias, cst.AsName))
                 and not (isinstance(a.parent(n), cst.Attribute) and a.parent(n).attr is n)]
    if len(amp_reads) != 2:  # the initialize's receiver and the stored value
        return False
    call = setter.init_call
    args: List[str] = []
    params = {p.name.value: p for p in setter.func.params.params}
    for arg in call.args[2:]:
        key, value = arg.keyword.value, arg.value  # type: ignore[union-attr]
        if key == "opt_level":
            level = literal_string(value) or _default_string(params, value)
            if isinstance(value, cst.Name) and value.value in params:
                if level != "O1":
                    a.report(arg, R.OPT_LEVEL, f"opt_level `{value.value}` is a parameter: the scaler is on unless it "
                                               "is \"O0\"; O2 and O3 runs now keep fp32 weights under autocast")
                args.append(f'enabled={value.value} != "O0"')
            elif level == "O0":
                args.append("enabled=False")
            elif level not in ("O1", "O2"):
                return False
        elif key == "loss_scale":
            s, num = literal_string(value), literal_number(value)
            if isinstance(value, cst.Name) and value.value in params:
                a.report(arg, R.STATIC_SCALE, f"loss_scale={value.value} is a parameter (default "
                                              f"{code_of(params[value.value].default) if params[value.value].default else 'none'}): "
                                              "GradScaler keeps dynamic scaling (apex's default); for a static value S "
                                              "use init_scale=S, growth_interval=2**30")
            elif s == "dynamic":
                pass
            elif num is not None:
                args += [f"init_scale={code_of(value)}", "growth_interval=2**30"]
            else:
                return False
    scaler = _scaler_call(a.ctx, args)
    a.plan.remove(setter.init_stmt)
    a.plan.replace_stmt[setter.store_stmt] = [parse_stmt(f"{setter.param}.{SCALER_ATTR} = {scaler}")]
    a.needs_torch = True
    a.report(call, R.INITIALIZE, f"`amp.initialize` -> `{setter.param}.{SCALER_ATTR} = {scaler}` (the model and "
                                 f"optimizer stay as they are; `{setter.param}.{setter.attr}` readers use the scaler)",
             fixed=True)
    a.report(setter.store_stmt, HANDLE_ON_OBJECT, f"`{setter.param}.{setter.attr} = amp` -> "
                                                  f"`{setter.param}.{SCALER_ATTR}`, the GradScaler its class reads",
             fixed=True)
    return True


def _default_string(params, value: cst.BaseExpression) -> Optional[str]:
    if isinstance(value, cst.Name) and value.value in params and params[value.value].default is not None:
        return literal_string(params[value.value].default)
    return None


class HandleOnObject(Codemod):
    """apex amp stored on an object in one module, used through it in another (see amp_object_attr)."""

    NAME = "amp_object_attr"
    DESCRIPTION = "apex amp stored on an object (`model.amp = amp`) and used through it -> a GradScaler attribute"
    CODES = (HANDLE_ON_OBJECT.code, R.AUTOCAST.code, R.SCALE_LOSS.code, R.STEP.code, R.NO_REGION.code)
    # `.amp`, `.amp_handle`, `.apex_amp`, `getattr(m, "amp")`; `.scaler` (a name the migration would take)
    TOKENS = (b".amp", b"amp_", b"_amp", b'"amp"', b"'amp'", b"scaler")
    PUBLISHES_FACTS = True

    def transform(self, wrapper: cst.MetadataWrapper, ctx: FileContext) -> cst.Module:
        module = wrapper.module
        index = ModuleIndex.of(module)
        table = ImportTable.of(module, ctx.module_name)
        publish(index, table, ctx)
        new = plan_user(module, ctx)
        return module if new is None else new

