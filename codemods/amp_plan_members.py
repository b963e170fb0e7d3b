"""The other amp members: state dicts, `master_params`, `disable_casts`, `_amp_state` scales, registries."""
from __future__ import annotations

import libcst as cst

from . import apex_flag_state
from . import amp_rules as R
from .amp_float_function import FLOAT_HELPER
from .amp_handle_rules import FLOAT_FUNCTION, REGISTRATION_COVERED
from .autocast_policy import CAST, autocast_covers
from .amp_old_init import plan_old_init
from .names import arg_by
from .amp_plan_state import AMP, AmpPlanState, code_of, optimizer_params, parse_expr


class MemberPlanning(AmpPlanState):
    """The other-members planning step of the amp analysis (codemods/amp.py)."""

    def _report_apex_flag_guard(self, call: cst.CSTNode, sc: str, what: str) -> None:
        """A2A173 at an `if APEX_FOUND:` (a flag that still says "apex is installed") around the state call."""
        if not self.use_scaler:
            return
        guard = apex_flag_state.flag_guard(self, call)
        if guard is not None:
            self.report(guard[0], R.SCALER_STATE_UNDER_APEX_FLAG, f"the scaler's state is {what} here only when "
                        f"`{guard[1]}` (apex is installed): without apex a resumed fp16 run loses its loss scale; "
                        f"guard it with `{sc}.is_enabled()` or drop the guard")

    def plan_others(self) -> None:
        codes = {"master_params": R.UNSCALE.code, "state_dict": R.STATE_DICT.code, "load_state_dict": R.STATE_DICT.code,
                 "disable_casts": R.DISABLE_CASTS.code}
        for site in self.sites:
            if self.in_dropped(site.call):
                continue
            k, call = site.kind, site.call
            code = codes.get(k, R.GET_SCALE.code if k.startswith("_amp_state") else "")
            if code and (not self.ctx.enabled(code) or self.ctx.suppressed(call, code)):
                continue
            sc = self.scaler_expr()
            if k == "master_params":
                if id(call) in self._mp_done:
                    continue
                o = arg_by(call, 0, "optimizer")
                if o is None:
                    self.report(call, R.UNSUPPORTED, "`amp.master_params()` without an optimizer")
                    continue
                self.plan.replace_node[call] = optimizer_params(code_of(o.value))
                self.report(call, R.UNSCALE, "`amp.master_params(opt)` -> the optimizer's parameters", fixed=True)
            elif k == "state_dict":
                if self.use_scaler:
                    self.plan.replace_node[call] = parse_expr(f"{sc}.state_dict()")
                    self.user_funcs.add(site.func)
                else:
                    self.plan.replace_node[call] = parse_expr("{}")
                self.report(call, R.STATE_DICT, f"`amp.state_dict()` -> `{sc}.state_dict()`", fixed=True)
                self._report_apex_flag_guard(call, sc, "saved")
            elif k == "load_state_dict":
                if self.use_scaler:
                    self.plan.replace_node[call.func] = parse_expr(f"{sc}.load_state_dict")
                    self.user_funcs.add(site.func)
                    self.report(call, R.STATE_DICT, f"`amp.load_state_dict(...)` -> `{sc}.load_state_dict(...)`", fixed=True)
                    self.report(call, R.OLD_CHECKPOINT, "checkpoints written by apex hold `loss_scaler0` state that "
                                                        "GradScaler rejects: convert them with `apex2amp "
                                                        "convert-checkpoint` (or convert at load time)")
                    self._report_apex_flag_guard(call, sc, "restored")
                else:
                    if isinstance(site.stmt, cst.SimpleStatementLine) and len(site.stmt.body) == 1:
                        self.plan.remove(site.stmt)
                        self.report(call, R.STATE_DICT, "bf16 has no scaler state: `amp.load_state_dict` removed",
                                    fixed=True)
                    else:
                        self.report(call, R.UNSUPPORTED, "`amp.load_state_dict` in an expression: remove it by hand")
            elif k == "disable_casts":
                self.plan.replace_node[call] = parse_expr(f'torch.autocast("{self.device}", enabled=False)')
                self.needs_torch = True
                self.report(call, R.DISABLE_CASTS, "`amp.disable_casts()` -> autocast disabled (add `.float()` to "
                                                   "inputs that must be fp32)", fixed=True)
            elif k.startswith("_amp_state"):
                if self._plan_get_scale(call):
                    continue
                self.report(call, R.INTERNALS, f"apex internal `{k}`: no native equivalent")
            elif k == "float_function" and len(call.args) == 1 and call.args[0].keyword is None and \
                    self.ctx.enabled(FLOAT_FUNCTION.code):
                self.plan.replace_node[call.func] = cst.Name(FLOAT_HELPER)  # codemods/amp_float_function.py
                self.needs_torch = self.needs_float_helper = True
                self.report(call, FLOAT_FUNCTION, f"`amp.float_function(...)` -> `{FLOAT_HELPER}(...)` (fp32 "
                                                  "arguments, autocast off inside; added to this file)", fixed=True)
            elif k.startswith(("register_", "half_function", "float_function", "promote_function", "bfloat16_function")):
                if not self._plan_covered_registration(site):
                    self.report(call, R.REGISTER, f"`amp.{k}`: autocast has no function registry")
            elif k in ("initialize", "scale_loss"):
                continue
            elif k == "init":
                done, why = plan_old_init(self, site)  # apex's old API (codemods/amp_old_init.py)
                if not done:
                    self.report(call, R.INTERNALS, f"`amp.init` (apex's old API) has no native equivalent here: {why}; "
                                                   "wrap the code it should cover in `torch.autocast(\"cuda\", "
                                                   "dtype=torch.float16, enabled=...)` by hand")
            else:
                self.report(call, R.INTERNALS, f"`amp.{k}` has no native equivalent")

    def _plan_covered_registration(self, site) -> bool:
        """A2A183: remove `amp.register_half_function(torch, "einsum")` (a statement of its own) where CUDA
        autocast already casts that function so (codemods/autocast_policy.py)."""
        call, k = site.call, site.kind
        if self.device != "cuda" or not self.ctx.enabled(REGISTRATION_COVERED.code) or \
                self.ctx.suppressed(call, REGISTRATION_COVERED.code):
            return False
        if len(call.args) != 2 or any(a.keyword is not None or a.star for a in call.args):
            return False
        name = call.args[1].value
        if not isinstance(name, cst.SimpleString) or not isinstance(name.evaluated_value, str):
            return False
        stmt = site.stmt
        if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and
                isinstance(stmt.body[0], cst.Expr) and stmt.body[0].value is call):
            return False
        modules = [m for m in self.table.qualified_names(call.args[0].value)
                   if autocast_covers(k, m, name.evaluated_value)]
        if not modules:
            return False
        self.plan.remove(stmt)
        short = modules[0].replace("torch.nn.functional", "F")
        self.report(call, REGISTRATION_COVERED, f"`amp.{k}(..., {name.value})` removed: autocast already runs "
                                                f"`{short}.{name.evaluated_value}` in {CAST[k]}", fixed=True)
        return True

    def _plan_get_scale(self, call: cst.Call) -> bool:
        f = call.func
        if isinstance(f, cst.Attribute) and f.attr.value == "loss_scale" and isinstance(f.value, cst.Subscript):
            base = f.value.value
            if isinstance(base, cst.Attribute) and base.attr.value == "loss_scalers" and self.use_scaler:
                sc = self.scaler_expr() if self.loss_scalers is None else \
                    f"{self.scaler_target()}[{code_of(f.value.slice[0].slice.value)}]"  # the same index
                self.plan.replace_node[call] = parse_expr(f"{sc}.get_scale()")
                self.user_funcs.add(self.func_of(call))
                index = code_of(f.value.slice[0].slice.value)
                self.report(call, R.GET_SCALE, f"`_amp_state.loss_scalers[{index}].loss_scale()` -> `{sc}.get_scale()`",
                            fixed=True)
                return True
        return False

    def report_decorators(self) -> None:
        table = self.table
        outer = self

        def visit_Decorator(n: cst.Decorator) -> None:
            d = n.decorator.func if isinstance(n.decorator, cst.Call) else n.decorator
            for q in table.qualified_names(d):
                if q == AMP + ".float_function" and d is n.decorator and outer.ctx.enabled(FLOAT_FUNCTION.code):
                    outer.plan.replace_node[n.decorator] = cst.Name(FLOAT_HELPER)  # codemods/amp_float_function.py
                    outer.needs_torch = outer.needs_float_helper = True
                    outer.report(n, FLOAT_FUNCTION, f"`@amp.float_function` -> `@{FLOAT_HELPER}` (fp32 arguments, "
                                                    "autocast off inside; added to this file)", fixed=True)
                    break
                if q.startswith(AMP + "."):
                    outer.report(n, R.REGISTER, f"`@{q.replace('apex.amp.', 'amp.')}`: autocast has no "
                                                f"function registry; use `torch.amp.custom_fwd` or a disabled "
                                                f"autocast region")

        self._replay(decorators=visit_Decorator)
