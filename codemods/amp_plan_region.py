"""The autocast region: around the forward pass and the loss the backward reads, or refused with a finding."""
from __future__ import annotations

from typing import List, Optional, Set

import libcst as cst

from . import amp_region_extend, amp_regions, region_scaler_update
from . import amp_rules as R
from .code_layout import indent_continuations
from .signatures import param_names
from .walk import iter_nodes
from .names import assigned_names, dotted_name, names_read, norm_code
from .amp_plan_state import AmpPlanState, BF16_SWITCHED, code_of, parse_expr


FORBIDDEN_IN_REGION = ("backward", "step", "scale_loss", "unscale_", "update")
_REGION_STOPPERS = frozenset({cst.Return, cst.Break, cst.Continue, cst.Yield, cst.FunctionDef, cst.ClassDef,
                              cst.Global, cst.Nonlocal})  # concrete node classes: matched by type
# `net = DDP(model)`, `net = torch.compile(model)`: the forward pass runs through the wrapper
_MODEL_WRAPPERS = ("DistributedDataParallel", "DDP", "DataParallel", "FullyShardedDataParallel", "FSDP", "compile")
_MODEL_MOVES = ("to", "cuda", "half", "float", "bfloat16", "train", "eval")  # nn.Module methods returning self


class RegionPlanning(AmpPlanState):
    """The autocast-region planning step of the amp analysis (codemods/amp.py)."""

    def plan_region(self, anchor: cst.CSTNode, loss: cst.BaseExpression, func: Optional[cst.FunctionDef]) -> None:
        wanted = names_read(loss) | ({dotted_name(loss)} if dotted_name(loss) else set())
        cur: cst.CSTNode = anchor
        while True:
            block, idx = self.block_of(cur)
            if block is None:
                if not self._region_at_callers(anchor, loss, func):
                    self._refuse_region(anchor, loss, func)
                return
            body = block.body  # type: ignore[attr-defined]
            end = -1
            for j in range(idx - 1, -1, -1):
                if assigned_names(body[j]) & wanted and not isinstance(body[j], (cst.FunctionDef, cst.ClassDef)):
                    end = j
                    break
            if end >= 0:
                break
            owner = self.owner_stmt(block)
            if isinstance(owner, (cst.Else, cst.ExceptHandler, cst.Finally)):
                owner = self.parent(owner)
            while isinstance(owner, cst.If) and isinstance(self.parent(owner), cst.If):
                owner = self.parent(owner)
            if owner is None or isinstance(owner, (cst.FunctionDef, cst.ClassDef, cst.Module)) or \
                    not isinstance(owner, cst.BaseCompoundStatement):
                if not self._region_at_callers(anchor, loss, func):
                    self._refuse_region(anchor, loss, func)
                return
            cur = owner
        # `try: out = model(x) except RuntimeError: ...; return False`: the loss comes from the try's body
        inner = amp_regions.try_body_source(self, body[end], wanted)
        while inner is not None:
            block, body, end = inner[0], inner[0].body, inner[1]
            inner = amp_regions.try_body_source(self, body[end], wanted)
        # backward slice within the block, not crossing backward/step code; an early exit may stay inside
        # when it skips no half-done scaler work (codemods/amp_region_extend.py)
        blocked_exit: Optional[cst.CSTNode] = None
        for exits in (True, False):
            needed = set(names_read(body[end])) | assigned_names(body[end])
            model_start = None
            stop, traced = -1, []
            for j in range(end, -1, -1):
                s = body[j]
                if j != end and self._stops_region(s, exits):
                    stop = j
                    break
                if j != end and not (assigned_names(s) & needed):
                    continue
                if j != end:
                    needed |= names_read(s)
                traced.append(s)
                if self._calls_model(s, func):
                    model_start = j
            rng = body[(end if model_start is None else model_start):end + 1]
            leaving = amp_region_extend.region_exits(self, rng, _inner_loop_exits) if exits else []
            if not leaving or amp_region_extend.exits_leave_clean_state(self, rng, leaving):
                break
            blocked_exit = leaving[0]
        if model_start is None:
            elsewhere = amp_regions.forward_elsewhere(self, body, stop, traced, needed, func)
            if elsewhere is not None:
                why = "" if blocked_exit is None else (
                    f" (the early exit at line {self.ctx.line_of(blocked_exit)} stays outside: a backward or step "
                    "runs before it in the same pass, and inside the region it would skip that step's "
                    "`scaler.update()`)")
                self.report(elsewhere[0], R.REGION_OUTSIDE_FORWARD, f"{elsewhere[1]}{why}; put the forward and the "
                                                                    "loss in one block (or add the autocast region "
                                                                    "by hand)")
                self._unsafe = "no autocast region can cover the forward pass the loss comes from"
                return
        start = model_start if model_start is not None else end
        rng = body[start:end + 1]
        if not self.ctx.enabled(R.AUTOCAST.code) or any(self.ctx.suppressed(s, R.AUTOCAST.code) for s in rng):
            return
        if any(self._stops_region(s, exits) for s in rng):
            self.report(anchor, R.NO_REGION, "the loss statement itself holds backward/step code: wrap the forward "
                                             "pass and loss in `torch.autocast(...)` by hand")
            self._unsafe = "no autocast region can cover the forward pass the loss comes from"
            return
        if any(self._inside_autocast(s) for s in (rng[0],)):
            return
        for s in rng:
            if any(self.index.contains(d, s) for d in self.dropped):
                return
        if model_start is None:
            # a region around the loss alone would leave the forward, wherever it runs, in fp32
            self.report(anchor, R.NO_REGION, f"{self._model_not_called()} among the statements the loss is computed "
                                             "from: an autocast region around the loss alone would train in fp32; "
                                             "if the forward pass runs elsewhere or under another name, put it next "
                                             "to the loss (or add `torch.autocast` around it by hand)")
            self._no_region = "no autocast region can be placed at the forward pass the loss comes from"
            return
        if amp_region_extend.join_planned(self, block, start, end, traced, anchor) is not None:
            return  # one region with the loss planned already (grown over this one), or refused
        enabled = self.enabled_for(func)
        switched = self.ctx.facts.extra.get(BF16_SWITCHED, [])
        if enabled is None and not self.has_init and not self.use_scaler and switched:
            self.report(rng[0], R.BF16_SWITCH_NOT_REACHED, f"`amp.initialize` in `{switched[0]}` is switched on and "
                                                           "off, and under bf16 no scaler carries that switch to "
                                                           "this region: pass it in (`amp_enabled`) and wrap the "
                                                           "forward pass and loss in `torch.autocast(..., "
                                                           "enabled=amp_enabled)` by hand, or migrate with float16")
            self._unsafe = "an autocast region that cannot follow another module's amp on/off switch"
            return
        if enabled is None and self.cond is not None and not self.use_scaler:
            # bf16: no scaler carries the switch here, and an autocast without it would run the mode
            # that turned amp off (O0, the fp32 flag) in bf16
            self.report(rng[0], R.NO_REGION, f"the switch that turned amp on (`{code_of(self.cond)}`) cannot be read "
                                             "here and bf16 has no scaler to carry it: pass it in and wrap the "
                                             "forward pass and loss in `torch.autocast(..., enabled=...)` by hand")
            self._unsafe = "an autocast region that cannot follow amp's on/off switch"
            return
        self._regions.append((block, start, end))
        args = [f'"{self.device}"', f"dtype={self.dtype}"]
        if enabled is not None:
            args.append(f"enabled={enabled}")
        head = parse_expr(f"torch.autocast({', '.join(args)})")
        self.needs_torch = True

        indent = self.module.default_indent

        def make(stmts: List[cst.BaseStatement], head: cst.BaseExpression = head) -> cst.BaseStatement:
            return cst.With(items=[cst.WithItem(head)], body=cst.IndentedBlock(body=indent_continuations(stmts, indent)))

        self.plan.wrap(rng[0], rng[-1], make)
        self.report(rng[0], R.AUTOCAST, f"forward and loss wrapped in `torch.autocast({', '.join(args)})`", fixed=True)

    def _refuse_region(self, anchor: cst.CSTNode, loss: cst.BaseExpression, func: Optional[cst.FunctionDef]) -> None:
        """No statement before the backward computes the loss and no caller in this module passes it in:
        without a region at the forward the mode would train in fp32, so the module is refused (A2A116)."""
        if not self.ctx.enabled(R.AUTOCAST.code) or self.ctx.suppressed(anchor, R.AUTOCAST.code) or \
                self._inside_autocast(anchor):
            return
        passed_in = func is not None and isinstance(loss, cst.Name) and loss.value in param_names(func)
        where = ("it is a parameter, and no caller in this module passes it in: the callers are in other files or "
                 "outside the run") if passed_in else "it is computed elsewhere"
        self.report(anchor, R.NO_REGION, f"the loss is not computed next to the backward ({where}), so no autocast "
                                         "region can be placed at the forward pass: wrap the forward pass and the "
                                         "loss in `torch.autocast(...)` by hand, then rerun")
        self._no_region = "no autocast region can be placed at the forward pass the loss comes from"

    def _region_at_callers(self, anchor: cst.CSTNode, loss: cst.BaseExpression,
                           func: Optional[cst.FunctionDef]) -> bool:
        """The loss is a parameter of a backward helper: plan the region at each of its callers in this
        module, around the forward and the loss they pass in. False when there is none to plan."""
        seen = getattr(self, "_helper_regions", set())
        self._helper_regions = seen
        if func is None:
            return False
        if id(func) in seen:
            # a second backward of the same helper (`delay_unscale=True` on the accumulation branch):
            # its callers' regions are planned, or refused with their findings, already
            return True
        callers = amp_regions.loss_at_callers(self, loss, func)
        if not callers:
            # a backward helper of other modules: its callers there wrap the loss (backward_helpers.py)
            return id(func) in self._helper_funcs()
        seen.add(id(func))
        for stmt, arg, caller in callers:
            self.plan_region(stmt, arg, caller)
            if self.use_scaler and "is_enabled()" in (self.enabled_for(caller) or ""):
                self.user_funcs.add(caller)
        return True

    def enabled_for(self, func: Optional[cst.FunctionDef]) -> Optional[str]:
        if self.cond is None:
            if not self.has_init and self.use_scaler:
                # the scaler comes from elsewhere: follow its switch
                return f"{self.scaler_expr()}.is_enabled()"
            return None
        if func is self.init_func:
            return code_of(self.cond)
        free = names_read(self.cond)
        params = param_names(func) if func is not None else set()
        if free <= (params | self.module_globals()):
            return code_of(self.cond)
        if self.use_scaler and not self.scaler_off:
            return f"{self.scaler_expr()}.is_enabled()"
        return None

    def module_globals(self) -> Set[str]:
        out: Set[str] = set(self.table.bindings)
        for s in self.module.body:
            out |= {n for n in assigned_names(s) if "." not in n}
        return out

    def _model_not_called(self) -> str:
        """What `_calls_model` looked for and did not find, for a finding's text."""
        if not self.models:
            return "no call of a parameter or `self.<attr>` (the model passed in)"
        names = ", ".join(f"`{m}`" for m in sorted(self.models))
        return f"no call of {names} (the model `amp.initialize` returned)"

    def _model_names(self) -> Set[str]:
        """The amp models and the names they are assigned to, as they are, wrapped or moved (`model =
        self.model`, `net = DDP(model)`, `m = model.cuda()`), gathered once the models are known."""
        if self._called_models is None or not self.models <= self._called_models:
            names = set(self.models)
            assigns = [n for n in self.index.nodes if type(n) is cst.Assign and len(n.targets) == 1]  # type: ignore
            grew = bool(names)
            while grew:
                grew = False
                for stmt in assigns:
                    target = norm_code(stmt.targets[0].target)
                    value = stmt.value
                    if target in names:
                        continue
                    if (isinstance(value, cst.Call) and self._wraps_model(value, names)) or \
                            (isinstance(value, (cst.Name, cst.Attribute)) and norm_code(value) in names):
                        names.add(target)
                        grew = True
            self._called_models = names
        return self._called_models

    @staticmethod
    def _wraps_model(call: cst.Call, names: Set[str]) -> bool:
        f = call.func
        if isinstance(f, cst.Attribute) and f.attr.value in _MODEL_MOVES and norm_code(f.value) in names:
            return True
        last = (dotted_name(f) or "").rpartition(".")[2]
        return last in _MODEL_WRAPPERS and bool(call.args) and call.args[0].keyword is None and \
            norm_code(call.args[0].value) in names

    def _calls_model(self, stmt: cst.CSTNode, func: Optional[cst.FunctionDef] = None) -> bool:
        """Whether `stmt` calls an amp model (or a wrapper of it); without an `initialize` in this
        module, any callable parameter or `self.<attr>` counts (the model arrives as an argument)."""
        models = self._model_names() if self.models else self.models
        callables: Set[str] = set()
        if not models:
            callables = param_names(func) - {"self", "cls"} if func is not None else set()
        for n in iter_nodes(stmt):
            if type(n) is not cst.Call:
                continue
            f = n.func  # type: ignore[attr-defined]
            if norm_code(f) in models:
                return True
            if isinstance(f, cst.Attribute) and f.attr.value == "forward" and norm_code(f.value) in models:
                return True
            if models and _unwrapped(f) in models:
                return True  # `model.module(x)`, `model.module.forward(x)`: the model inside a DDP wrapper
            if not models and isinstance(f, cst.Name) and f.value in callables:
                return True
            if not models and isinstance(f, cst.Name) and amp_regions.forward_through_helper(self, n, callables):
                return True  # `loss, n = _fwd_pass(self.model, batch)`: the forward runs in that helper
            if not models and isinstance(f, cst.Attribute) and f.attr.value == "forward" and (
                    (isinstance(f.value, cst.Name) and f.value.value in callables) or (
                        isinstance(f.value, cst.Attribute) and isinstance(f.value.value, cst.Name) and
                        f.value.value.value == "self")):
                return True  # `self.model.forward(**batch)`, `model.forward(x)`
            if not models and isinstance(f, cst.Attribute) and isinstance(f.value, cst.Name) and \
                    f.value.value == "self" and f.attr.value not in ("forward",):
                return True
        return False

    def _stops_region(self, stmt: cst.CSTNode, exits: bool = True) -> bool:
        """Whether `stmt` must stay outside the autocast region planned: `_forbidden` code (an early exit
        only with `exits` false), or a call of a backward helper (codemods/amp_region_extend.py)."""
        return self._forbidden(stmt, exits) or amp_region_extend.runs_backward(self, stmt)

    def _forbidden(self, stmt: cst.CSTNode, exits: bool = False) -> bool:
        """Whether `stmt` holds code that must stay outside an autocast region (backward, step,
        control flow that leaves the block unless `exits` lets it stay, nested definitions)."""
        inner = _inner_loop_exits(stmt)
        allowed = amp_region_extend.EXITS if exits else ()
        return any((type(n) in _REGION_STOPPERS and id(n) not in inner and type(n) not in allowed) or (
            type(n) is cst.Call and type(n.func) is cst.Attribute and n.func.attr.value in FORBIDDEN_IN_REGION and
            (n.func.attr.value != "update" or region_scaler_update.is_scaler_update(self, n)))
            for n in iter_nodes(stmt))

    def _inside_autocast(self, stmt: cst.CSTNode) -> bool:
        cur = self.parent(stmt)
        while cur is not None and not isinstance(cur, (cst.FunctionDef, cst.Module)):
            if isinstance(cur, cst.With):
                for item in cur.items:
                    if isinstance(item.item, cst.Call) and any(
                            q.endswith("autocast") for q in self.table.qualified_names(item.item.func)):
                        return True
            cur = self.parent(cur)
        return False


def _unwrapped(f: cst.BaseExpression) -> Optional[str]:
    """`model` for `model.module` / `model.module.forward` (a DDP or DataParallel's wrapped model)."""
    if isinstance(f, cst.Attribute) and f.attr.value == "forward":
        f = f.value
    if not (isinstance(f, cst.Attribute) and f.attr.value == "module"):
        return None
    while isinstance(f, cst.Attribute) and f.attr.value == "module":
        f = f.value
    return norm_code(f)


def _inner_loop_exits(stmt: cst.CSTNode) -> Set[int]:
    """The `break`/`continue` statements of loops inside `stmt` (`for m in model.modules(): ...
    continue`): they leave only that inner loop, so they do not stop a region around `stmt`."""
    out: Set[int] = set()

    def walk(node: cst.CSTNode, in_loop: bool) -> None:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return
        if in_loop and isinstance(node, (cst.Break, cst.Continue)):
            out.add(id(node))
        for child in node.children:
            # a loop's own `else:` block runs outside the loop: its break/continue leave the block above
            inner = in_loop or (isinstance(node, (cst.For, cst.While)) and child is node.body)
            walk(child, inner)

    if isinstance(stmt, cst.CSTNode):
        walk(stmt, False)
    return out
