"""apex.amp -> torch.amp: initialize, scale_loss, optimizer steps, autocast region, clipping, state dicts.

The sites of one migration change together, so one analysis plans all of them (an `EditPlan`) and
applies them at once. When any `amp.initialize` or `amp.scale_loss` site has a shape that is not
migrated safely, the module's amp code is left alone and every site is reported. Each planning step
is a module of its own (codemods/amp_plan_*.py) over one state (`amp_plan_state.AmpPlanState`); this
module runs them in order.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import libcst as cst

from . import init_helpers
from . import amp_dead_modes, amp_handle_rules, amp_losses, amp_threading, checkpoint_pairs  # noqa: F401 (rules)
from .amp_constructor_scaler import finish_constructor_scaler, take_constructor_scaler
from . import amp_rules as R
from .base import Codemod, FileContext, facts_key
from .edits import apply_plan
from .importing import add_helper_function, ensure_imports
from .amp_plan_backward_helpers import BackwardHelperPlanning
from .amp_plan_branches import NATIVE_AMP, NativeBranchPlanning
from .amp_plan_clipping import CLIP_FUNCS, ClipPlanning
from .amp_plan_init_helpers import InitHelperPlanning
from .amp_plan_initialize import (DROPPED_INIT_KWARGS, FORWARD_HELPER, FORWARD_HELPER_CODE, REPORTED_INIT_KWARGS,
                                  InitializePlanning)
from .amp_plan_members import MemberPlanning
from .amp_plan_preflight import PreflightChecks
from .amp_plan_region import FORBIDDEN_IN_REGION, RegionPlanning
from .amp_plan_scale_loss import ScaleLossPlanning
from .amp_plan_state import AMP, BF16_SWITCHED, CALLERS_KEEP_AMP, CORE_CODES, AmpPlanState, code_of
from .amp_plan_steps import StepPlanning
from .amp_object_attr_rewrite import plan_setter
from .amp_inference import HALF_HELPER, HALF_HELPER_CODE
from .amp_float_function import FLOAT_HELPER, helper_code as float_helper_code
from .amp_plan_threading import ThreadingPlanning

__all__ = ["AMP", "BF16_SWITCHED", "CALLERS_KEEP_AMP", "CLIP_FUNCS", "CORE_CODES", "DROPPED_INIT_KWARGS",
           "FORBIDDEN_IN_REGION", "FORWARD_HELPER", "FORWARD_HELPER_CODE", "NATIVE_AMP", "REPORTED_INIT_KWARGS",
           "ApexAmpToTorchAmp"]


class _Analysis(PreflightChecks, NativeBranchPlanning, InitHelperPlanning, InitializePlanning, ScaleLossPlanning,
                RegionPlanning, BackwardHelperPlanning, StepPlanning, ClipPlanning, MemberPlanning, ThreadingPlanning, AmpPlanState):
    """The planning steps over one `AmpPlanState`, run in order by `run`."""

    def run(self) -> None:
        self.collect()
        self.has_scale_loss = any(s.kind == "scale_loss" for s in self.sites)
        if not self.sites:
            if self.ctx.facts.scaler_functions and self.use_scaler:
                # a module without amp that calls helpers which now take the scaler
                self.plan_threading_only()
            self.report_decorators()  # `@amp.float_function` may be the module's only apex use
            calls = self.init_helper_calls()
            with_optimizer = self.report_init_helper_calls_without_optimizer([c for c in calls if not c[1]["held"]])
            with_optimizer += [c for c in calls if c[1]["held"] and not self.init_helper_call_without_optimizer(*c)]
            for call, _ in sorted(with_optimizer, key=lambda c: calls.index(c)):
                # a caller training with the helper's amp state but no amp code of its own (autocast lost)
                self.report(call, R.UNSUPPORTED, f"`{code_of(call.func)}(...)` amp-initializes in its module (a "
                                                 "setup helper), but this module has no apex amp code to migrate "
                                                 "onto a GradScaler: migrate by hand; the helper keeps its "
                                                 "`amp.initialize`")
            return
        self._pick_scaler_name()
        self._take_scaler_from_subclass()
        # calls of other modules' setup helpers (A2A186); those held back keep their amp.initialize, and this
        # module's amp code stays with them (planned as if migrating, so that its own refusals are reported)
        found_helper_calls = self.init_helper_calls()
        held_helper_calls = [c for c in found_helper_calls if c[1]["held"]]
        # a trainer class built by the scripts that initialize (not one that calls a setup helper)
        constructor_init = take_constructor_scaler(self) if not found_helper_calls else None
        if not all(self.ctx.enabled(c) for c in CORE_CODES):
            self._abort_all(leftovers=False)  # the sites are left to rules this run's selection leaves out
            return
        if self._held_or_kept():
            return
        if plan_setter(self):  # apex amp stored on an object for another module (codemods/amp_object_attr.py)
            return
        self.drop_apex_branches()
        amp_dead_modes.drop_unselectable_apex_branches(self, R.UNSELECTABLE_APEX_MODE)  # `self.backend == "apex"`
        live = [s for s in self.sites if not self.in_dropped(s.call)]
        inits = [s for s in live if s.kind == "initialize"]
        self._refuse_inits(live, inits)
        if not self.abort and self.plan_init_helper_module(live, inits):  # a setup helper for other modules
            self.report_decorators()
            return
        helper_calls = self.report_init_helper_calls_without_optimizer(found_helper_calls)
        if helper_calls and (inits or len(helper_calls) > 1):
            for call, _ in helper_calls:
                self.report(call, R.UNSUPPORTED, f"`{code_of(call.func)}(...)` amp-initializes in its module (a "
                                                 "setup helper) beside another amp initialization here: migrate by "
                                                 "hand; the helper keeps its `amp.initialize`")
            self.abort = True
        self.loss_scalers = amp_losses.plan(self, live) if not self.abort else None
        for s in inits:
            if not self.abort:
                self.plan_initialize(s)
        for call, spec in helper_calls:
            if not self.abort:
                self.plan_init_helper_call(call, spec)
        if inits and not self.use_scaler and self.cond is not None and self.ctx.module_name:
            # bf16: no scaler carries this switch to the regions of other modules (A2A174)
            self.ctx.exported.extra.setdefault(BF16_SWITCHED, []).append(self.ctx.module_name)
        regions: List[Tuple[cst.CSTNode, cst.BaseExpression, Optional[cst.FunctionDef]]] = []
        for s in live:
            if s.kind == "scale_loss" and not self.abort:
                r = self.plan_scale_loss(s)
                if r is not None:
                    regions.append((r[0], r[1], s.func))
        if self.abort:
            self._abort_all()
            return
        if not self.has_init and self.has_scale_loss:
            self.cond = None
        for anchor, loss, func in regions:
            self.plan_region(anchor, loss, func)
        self.plan_helper_calls()
        self.plan_steps()
        self.plan_clipping()
        self.plan_others()
        self.report_decorators()
        if not checkpoint_pairs.plan_pairs(self):
            return
        if self._unsafe:
            self.report(self.sites[0].call, R.UNSUPPORTED, f"{self._unsafe}: this module's amp code is left as it "
                                                           "is; fix the findings above by hand (or restructure) "
                                                           "and rerun")
            self._abort_all()
            return
        self.plan_threading()
        if self._refusal is not None:
            self.report(self._refusal[0], R.SIGNATURE_KEPT, f"{self._refusal[1]}; this module's amp code is left "
                                                            "as it is")
            self._abort_all()
            candidates = amp_threading.candidate_classes(self) if not self._no_region else []
            if candidates:
                self.ctx.exported.attr_candidates[self.ctx.module_name] = candidates
            return
        if self._threading_failed:
            node = self._threading_failed_at or self.init_func or self.module
            self.report(node, R.UNSUPPORTED, f"{self._threading_failed}: return the scaler from the function that "
                                             "creates it and pass it along (or create it where it is used), then "
                                             "rerun; this module's amp code is left as it is")
            self._abort_all()
            return
        if self._no_region:
            self.report(self.sites[0].call, R.UNSUPPORTED, f"{self._no_region}: this module's amp code is left as it "
                                                           "is; fix the findings above by hand (or restructure) "
                                                           "and rerun")
            self._abort_all()
            return
        if held_helper_calls:
            for call, _ in held_helper_calls:
                self.report(call, R.LEFTOVER, f"`{code_of(call.func)}(...)` amp-initializes in its module and keeps "
                                              "its `amp.initialize` (held back, see the findings there): this "
                                              "module's amp code stays with it")
            self._abort_all()
            return
        if constructor_init is not None:
            finish_constructor_scaler(self, constructor_init)
        init = next((s for s in live if s.kind == "initialize"), None)
        if init is not None and self.use_scaler and not self.scaler_global and not self.scaler_is_attr and \
                not any(s.kind == "scale_loss" for s in live) and not self._steps and not self._threaded_calls:
            if self.ctx.module_name and self.ctx.facts.extra.get(
                    init_helpers.HELD + facts_key(self.ctx.path, self.ctx.module_name)):
                self.ctx.report(init.call, R.INIT_HELPER.code, "a setup helper for other modules, held back: no file "
                                "of this run calls it, or one that does keeps its amp code (see its findings); the "
                                "helper and its callers migrate together", severity="warning")
            # nothing here scales, steps or passes the scaler on (a registry call such as
            # `amp.register_half_function` beside it is no step): the backward and the step are in code
            # this run does not rewrite, which still needs the amp state
            self.report(init.call, R.STEP_MISSING, "no backward or step of the amp optimizer in this module and no "
                                                   "function of this run takes the scaler: the training step lives "
                                                   "elsewhere (another module or a library) and still needs "
                                                   "`amp.initialize`; migrate the two together")
            self._abort_all(publish=False)  # pass 2 may find the function that takes the scaler



class ApexAmpToTorchAmp(Codemod):
    """apex.amp -> torch.amp autocast + GradScaler."""

    NAME = "amp"
    DESCRIPTION = "apex.amp (initialize, scale_loss, steps, master_params, state dicts) -> torch.amp"
    CODES = tuple(f"A2A1{i:02d}" for i in range(1, 25)) + ("A2A126", "A2A127", "A2A128", "A2A130", "A2A131",
                                                           "A2A135", "A2A136", "A2A137", "A2A140", "A2A141",
                                                           "A2A142", "A2A145", "A2A147", "A2A148", "A2A173", "A2A174",
                                                           "A2A416", "A2A417", "A2A418",
                                                           "A2A180", "A2A181", "A2A182", "A2A183", "A2A184", "A2A185",
                                                           "A2A186")  # codemods/amp_handle_rules.py
    TOKENS, WORDS = (b"scaler",), (b"apex",)  # the word: not the apex of `# apex2amp: ignore`
    PUBLISHES_FACTS = True  # the functions that now take the scaler, for call sites in other files

    def transform(self, wrapper: cst.MetadataWrapper, ctx: FileContext) -> cst.Module:
        a = _Analysis(wrapper, ctx)
        a.run()
        if a.exported_funcs and ctx.module_name:
            key = facts_key(ctx.path, ctx.module_name)
            ctx.exported.scaler_functions.setdefault(key, []).extend(a.exported_funcs)
            ctx.exported.scaler_params[key] = a.scaler_ref
        if a.plan and ctx.module_name:
            if a.exported_methods:  # the engine checks no other file references them (method_refs.foreign_refs)
                ctx.exported.scaler_methods[facts_key(ctx.path, ctx.module_name)] = list(a.exported_methods)
            if a.scaler_is_attr and a.has_init:
                ctx.exported.scaler_bases.update(amp_threading.published_bases(a))
        if not a.plan:
            return wrapper.module
        new = apply_plan(wrapper.module, a.plan)
        if a.needs_torch:
            new = ensure_imports(new, ["torch"])
        if a.needs_forward_helper:
            new = add_helper_function(new, FORWARD_HELPER, FORWARD_HELPER_CODE)
        if getattr(a, "needs_half_helper", False):  # O3 inference (codemods/amp_inference.py)
            new = add_helper_function(new, HALF_HELPER, HALF_HELPER_CODE)
        if getattr(a, "needs_float_helper", False):  # codemods/amp_float_function.py
            new = add_helper_function(new, FLOAT_HELPER, float_helper_code(ctx.options.device))
        return new


