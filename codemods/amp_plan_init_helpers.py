"""Init helpers (codemods/init_helpers.py): this module's setup helper that amp-initializes for other
modules, and calls of other modules' setup helpers here, which make the GradScaler after the call.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import libcst as cst

from . import init_helpers
from . import amp_rules as R
from .amp_plan_init_by_name import stored_on_self
from .amp_plan_initialize import _and, _paren, _LOOSER_THAN_COMPARISON
from .amp_plan_state import AmpPlanState, code_of, flatten, parse_expr, parse_stmt
from .base import facts_key
from .bool_exprs import as_bool
from .names import assigned_names, dotted_name, literal_string, names_read, norm_code
from .walk import iter_nodes


class InitHelperPlanning(AmpPlanState):
    """The init-helper planning step of the amp analysis (codemods/amp.py)."""

    def plan_init_helper_module(self, live: List[Any], inits: List[Any]) -> bool:
        """This module is a setup helper for other modules: its `amp.initialize` (and the registrations
        autocast makes) dropped, the helper published; True when planned."""
        if len(inits) != 1 or not self.ctx.module_name or not self.use_scaler or self.abort:
            return False
        key = facts_key(self.ctx.path, self.ctx.module_name)
        if any(s.kind == "scale_loss" for s in self.sites):
            return False
        spec = init_helpers.helper_spec(self, inits[0], live)
        if spec is None:
            return False
        init = inits[0]
        code = R.INIT_HELPER.code
        if not self.ctx.enabled(code) or self.ctx.suppressed(init.call, code) or self.ctx.suppressed(init.stmt, code):
            return False  # deselected or suppressed: not published, so its callers keep their apex code too
        fn = init.func.name.value
        self.ctx.exported.extra[init_helpers.PREFIX + key] = {fn: spec}  # for the callers (and migrate/helper_groups.py)
        if not self.ctx.facts.extra.get(init_helpers.CALLED + key):
            return False  # not known to be called by migrating files only: its amp.initialize stays (A2A124)
        snap, found = self.plan.snapshot(), len(self.ctx._stage_findings)
        for s in live:
            if s is not init and not self._plan_covered_registration(s):  # deselected or suppressed
                self.plan.restore(snap)
                del self.ctx._stage_findings[found:]
                return False
        self.plan.remove(init.stmt)
        self.ctx.exported.extra[init_helpers.CALLED + key] = True  # its callers make the scaler (pass 2)
        self.report(init.call, R.INIT_HELPER, f"`{fn}` is a setup helper: `amp.initialize` dropped (the model and "
                                              "optimizer pass through); the modules of this run that call it make "
                                              "the GradScaler after the call and migrate their amp code on it",
                    fixed=True)
        return True

    def init_helper_calls(self) -> List[Tuple[cst.Call, Dict[str, Any]]]:
        """Calls of other modules' setup helpers in this module, in tree order (spec["held"]: the helper
        keeps its `amp.initialize`)."""
        if not self.ctx.facts.extra:
            return []
        helpers = init_helpers.known(self.ctx.facts)
        if not helpers:
            return []
        mine = facts_key(self.ctx.path, self.ctx.module_name) if self.ctx.module_name else ""
        top = self.ctx.module_name.partition(".")[0] if "." in self.ctx.module_name else ""
        found: List[Tuple[cst.Call, Dict[str, Any]]] = []
        for n in self.index.calls:
            qs = set(self.table.qualified_names(n.func))
            qs |= {f"{top}.{q}" for q in qs} if top else set()
            hit = sorted(q for q in qs if q in helpers and helpers[q]["key"] != mine)
            if hit:
                found.append((n, helpers[hit[0]]))
        return found

    @staticmethod
    def init_helper_call_without_optimizer(call: cst.Call, spec: Dict[str, Any]) -> bool:
        """`prepare(model, None, ...)`, or the optimizer argument left out."""
        ok, opt = init_helpers.call_arg(call, spec["optimizer"], spec["params"][spec["optimizer"]])
        return ok and (opt is None or (isinstance(opt, cst.Name) and opt.value == "None"))

    def report_init_helper_calls_without_optimizer(self, calls: List[Tuple[cst.Call, Dict[str, Any]]]) -> \
            List[Tuple[cst.Call, Dict[str, Any]]]:
        """Report the calls passing no optimizer (`prepare(model, None, ...)`); the others are returned."""
        out = []
        for call, spec in calls:
            fn = code_of(call.func)
            if self.init_helper_call_without_optimizer(call, spec):
                self.ctx.report(call, R.INIT_HELPER.code, f"`{fn}(...)` without an optimizer: under apex its "
                                                              "`amp.initialize` got none (fp16 failed there); the "
                                                              "model now runs fp32: for fp16 inference wrap the "
                                                              "forward in `torch.autocast(\"cuda\", "
                                                              "dtype=torch.float16)`", severity="warning")
                continue
            out.append((call, spec))
        return out

    def plan_init_helper_call(self, call: cst.Call, spec: Dict[str, Any]) -> None:
        """The GradScaler after a helper call, as `plan_initialize` makes it at an `amp.initialize`."""
        fn = code_of(call.func)
        stmt, func = self.stmt_of(call), self.func_of(call)
        params = spec["params"]

        def refuse(why: str) -> None:
            self.report(call, R.UNSUPPORTED, f"`{fn}(...)` amp-initializes in its module (a setup helper), but "
                                             f"{why}: migrate by hand; the helper keeps its `amp.initialize`")
            self.abort = True

        def arg(slot: int) -> Tuple[bool, Optional[cst.BaseExpression]]:
            ok, v = init_helpers.call_arg(call, slot, params[slot])
            if ok and v is None and params[slot] in spec["defaults"]:
                v = parse_expr(spec["defaults"][params[slot]])
            return ok, v

        small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
        if not (isinstance(small, cst.Assign) and small.value is call and len(small.targets) == 1 and
                isinstance(small.targets[0].target, (cst.Tuple, cst.List)) and
                len(small.targets[0].target.elements) == 2):
            refuse("its result is not assigned to a model and an optimizer")
            return
        conds, _ = self.gate_of(stmt)
        if conds or self.parent(stmt) is None or not hasattr(self.parent(stmt), "body"):
            refuse("the call is under a condition")
            return
        target = small.targets[0].target
        ok_m, model = arg(spec["model"])
        ok_o, opt = arg(spec["optimizer"])
        if not ok_m or not ok_o or model is None or opt is None:
            refuse("its model and optimizer arguments are not found")
            return
        cond_list: List[cst.BaseExpression] = []
        if spec["fp16"] >= 0:
            ok, v = arg(spec["fp16"])
            if not ok or v is None:
                refuse(f"its `{params[spec['fp16']]}` argument is not found")
                return
            cond_list.append(v)
        level = spec["level"]
        if spec["opt_level"] >= 0:
            ok, v = arg(spec["opt_level"])
            if not ok or v is None:
                refuse(f"its `{params[spec['opt_level']]}` argument is not found")
                return
            level = literal_string(v)
            if level is None:
                cond_list.append(cst.Comparison(_paren(v, _LOOSER_THAN_COMPARISON), [cst.ComparisonTarget(
                    cst.NotEqual(), cst.SimpleString('"O0"'))]))
        if level in ("O4", "O5", "O3"):
            refuse(f"it runs at opt_level {level}")
            return
        if level == "O0":
            cond_list = [parse_expr("False")]
        parts = [e.value for e in target.elements]  # type: ignore[union-attr]
        for e in [model, *flatten(parts[0])]:
            self.models.add(norm_code(e))
        for e in [opt, *flatten(parts[1])]:
            self.optimizers.add(norm_code(e))
        self.init_func = func
        if func is None:
            self.scaler_global = True
        elif all((dotted_name(t) or "").startswith("self.") for t in flatten(target)) and \
                self.class_of(func) is not None:
            self.scaler_is_attr = True
        elif self.class_of(func) is not None and stored_on_self(self, stmt, target):
            self.scaler_is_attr = True
        cond = _and(cond_list)
        if cond is not None and (any(isinstance(n, cst.Call) for n in iter_nodes(cond)) or
                                 names_read(cond) & assigned_names(stmt)):
            refuse(f"the scaler's enabled= (`{code_of(cond)}`) would be evaluated again after the call, "
                   "calling a function or reading a name the call's assignment rebinds")
            return
        self.cond = as_bool(cond, self.module)
        if level == "O2":
            from .opt_level_notes import opt_level_message
            self.report(call, R.OPT_LEVEL, opt_level_message(level, self.ctx.options.target))
        args = [] if self.ctx.options.grad_scaler_callee.startswith("torch.cuda.") else [f'"{self.device}"']
        if self.cond is not None:
            args.append(f"enabled={code_of(self.cond)}")
        self.plan.insert_after(stmt, [parse_stmt(f"{self.scaler_target()} = "
                                                 f"{self.ctx.options.grad_scaler_callee}({', '.join(args)})")])
        self.needs_torch = True
        self.has_init = True
        self.scaler_anchor = stmt
        self.report(call, R.INIT_HELPER, f"`{fn}(...)` amp-initialized in its module (a setup helper) -> a "
                                         "GradScaler after the call" + (f" (enabled={code_of(self.cond)})"
                                                                        if self.cond is not None else ""),
                    fixed=True)
