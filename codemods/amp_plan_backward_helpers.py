"""Backward helpers: this module's functions other modules call to scale their loss, and calls of other
modules' helpers here (codemods/backward_helpers.py).
"""
from __future__ import annotations

from typing import Dict, List, Tuple

import libcst as cst

from . import backward_helpers
from . import amp_rules as R
from .base import facts_key
from .names import arg_by, norm_code
from .amp_plan_state import AmpPlanState
from .amp_plan_threading import called_modules, visible_modules


class BackwardHelperPlanning(AmpPlanState):
    """The backward-helper planning step of the amp analysis (codemods/amp.py)."""

    def _helper_funcs(self) -> Dict[int, Tuple[int, int]]:
        """id(function) -> (loss slot, optimizer slot) of this module's backward helpers for other modules:
        no `amp.initialize` here, and every `scale_loss` in a module-level function taking both the loss
        and the optimizer, which it does not step (codemods/backward_helpers.py)."""
        cached = getattr(self, "_helpers_cache", None)
        if cached is not None:
            return cached
        out: Dict[int, Tuple[int, int]] = {}
        scales = [x for x in self.sites if x.kind == "scale_loss" and not self.in_dropped(x.call)]
        kinds = {x.kind for x in self.sites if not self.in_dropped(x.call)}
        key = facts_key(self.ctx.path, self.ctx.module_name) if self.ctx.module_name else ""
        if key and scales and kinds == {"scale_loss"} and self.use_scaler and \
                not self.ctx.facts.extra.get(backward_helpers.HELD + key):
            for x in scales:
                loss, opt = arg_by(x.call, 0, "loss"), arg_by(x.call, 1, "optimizers")
                slots = backward_helpers.helper_slots(x.func, loss.value if loss else None,
                                                      opt.value if opt else None)
                # any `.step` in the module: it steps here, not a helper for other modules
                if slots is None or not isinstance(self.parent(x.func), cst.Module) or \
                        "step" in self.index.attr_values:
                    out = {}
                    break
                out[id(x.func)] = slots
        self._helpers_cache = out
        return out

    def _publish_helpers(self) -> None:
        helpers = self._helper_funcs()
        funcs = {id(x.func): x.func for x in self.sites if x.kind == "scale_loss"}
        named = {funcs[i].name.value: slots for i, slots in helpers.items()}
        backward_helpers.publish(self.ctx.exported, facts_key(self.ctx.path, self.ctx.module_name), named)
        for i in helpers:
            self.user_funcs.add(funcs[i])
            self.report(funcs[i], R.BACKWARD_HELPER, f"`{funcs[i].name.value}` is a backward helper: the modules of "
                                                     "this run that call it pass the scaler, run the loss they pass "
                                                     "under autocast and step with `scaler.step` + `scaler.update`",
                        fixed=True)

    def plan_helper_calls(self) -> None:
        """Calls of other modules' backward helpers: the loss passed in gets its autocast region here, and the
        call counts as the backward of the optimizer passed in (its step and clip migrate here)."""
        if not self.use_scaler or not self.ctx.facts.extra:
            return
        visible = visible_modules(self.ctx.facts, self.ctx, called_modules(self))
        helpers = backward_helpers.known(self.ctx.facts, visible)
        if not helpers:
            return
        table = self.table
        found: List[Tuple[cst.Call, Tuple[int, int]]] = []
        names = set(helpers)

        def visit_Call(n: cst.Call) -> None:
            hit = sorted(table.qualified_names(n.func) & names)
            if hit:
                found.append((n, helpers[hit[0]]))

        self._replay(calls=visit_Call)
        for call, (loss_slot, opt_slot) in found:
            loss = backward_helpers.call_arg(call, loss_slot, "loss")
            opt = backward_helpers.call_arg(call, opt_slot, "optimizer")
            stmt, func = self.stmt_of(call), self.func_of(call)
            if loss is None or opt is None or self.in_dropped(call):
                continue
            self.plan_region(stmt, loss, func)
            self._backwards.append((stmt, func, {norm_code(opt)}))
            self.user_funcs.add(func)
