"""Reasons found before planning to leave a module's amp code alone: held back, kept by callers, unmigrated imports."""
from __future__ import annotations

from typing import List, Optional

import libcst as cst

from . import amp_multi_init, amp_private, amp_reinit, amp_threading
from . import amp_rules as R
from .base import facts_key
from .amp_inference import only_inference_inits
from .amp_facts_index import keys_by_module, unmigrated_modules
from .amp_plan_state import AmpPlanState, AmpSite, CALLERS_KEEP_AMP, CORE_CODES


class PreflightChecks(AmpPlanState):
    """The checks the amp analysis (codemods/amp.py) runs before it plans."""

    def _imported_unmigrated_amp(self) -> Optional[str]:
        """A module this one imports whose amp code pass 1 left unmigrated (matched by its last name
        component, so an import spelled from another root still counts); a mixin module whose classes
        read the scaler of this run's subclasses in pass 2 (`amp_threading.rescued`) does not count."""
        facts = self.ctx.facts
        if not facts.unmigrated_amp:
            return None
        mine = self.ctx.module_name
        # a name under `apex` is NVIDIA apex's here (a module whose `apex` is a local file never gets
        # this far: migrate/apex_shadow.py), not a module of the run that happens to be called apex
        imported = {part for qs in self.table.bindings.values() for q in qs
                    if q != "apex" and not q.startswith("apex.") for part in q.split(".")}
        by_last = unmigrated_modules(facts.unmigrated_amp).by_last
        candidates = sorted(c for part in imported for c in by_last.get(part, ()))
        if not candidates:
            return None
        # a helper held back because this very module keeps its amp code: this module's own findings say why
        keeping = facts.extra.get(CALLERS_KEEP_AMP, {})
        keys = keys_by_module(keeping)
        for _, m in candidates:
            if m == mine or amp_threading.rescued(facts, m) is not None:
                continue
            if any(mine in keeping[k] for k in keys.get(m, ())):
                continue
            return m
        return None

    def _held_back(self) -> Optional[cst.CSTNode]:
        """A reason to leave the whole module alone: the coordinated rewrite cannot be done in part."""
        ctx = self.ctx
        if not all(ctx.enabled(c) for c in CORE_CODES):
            return self.sites[0].call
        for s in self.sites:
            code = {"initialize": R.INITIALIZE.code, "scale_loss": R.SCALE_LOSS.code}.get(s.kind)
            if code and (ctx.suppressed(s.stmt, code) or ctx.suppressed(s.call, code)):
                return s.call
        return None

    def _held_or_kept(self) -> bool:
        """Whether the module's amp code is left alone before planning (reported): a core site held back,
        or a module of the run that calls its functions keeps its own apex amp code."""
        held = self._held_back()
        if held:
            self.report(held, R.LEFTOVER, "the amp migration of this module is held back: a core site is "
                                          "suppressed (`# apex2amp: ignore`) or its rule is not selected")
            self._abort_all()
            return True
        keeping = self.ctx.facts.extra.get(CALLERS_KEEP_AMP, {}).get(facts_key(self.ctx.path, self.ctx.module_name)) \
            if self.ctx.module_name else None
        if keeping:
            self.report(self.sites[0].call, R.LEFTOVER, f"`{keeping[0]}` calls this module's functions and keeps its "
                                                        "apex amp code: these functions cannot take the scaler alone; "
                                                        f"fix `{keeping[0]}`'s findings, then rerun")
            self._abort_all()
            return True
        return False

    def _refuse_inits(self, live: List[AmpSite], inits: List[AmpSite]) -> None:
        """Set `abort` (reported) where this module's `amp.initialize` sites cannot migrate; a
        re-initialization before `amp.load_state_dict` is removed instead, and leaves `live` and `inits`."""
        kept = self._imported_unmigrated_amp() if inits else None
        if kept:
            for s in inits:
                self.report(s.call, R.UNSUPPORTED, f"`{kept}` keeps apex amp code this run could not migrate (see "
                                                   "its findings) and relies on the state `amp.initialize` sets up: "
                                                   "migrate the two together by hand, then rerun")
            self.abort = True
        reinits = amp_reinit.removable_reinitializations(self, inits) if len(inits) > 1 and not self.abort else []
        for s in reinits:  # a restore that re-runs initialize before amp.load_state_dict (codemods/amp_reinit.py)
            inits.remove(s)
            live.remove(s)
            self.plan.remove(s.stmt)
            self.report(s.call, R.REINITIALIZE, "second `amp.initialize` (before `amp.load_state_dict`) removed: "
                                                "the GradScaler made at the first one is the one the load restores",
                        fixed=True)
        private = amp_private.private_state_use(self) if inits and not self.abort else None
        if private is not None:
            self.report(private[0], R.INTERNALS, f"apex internal `{private[1]}` exists only after `amp.initialize`: "
                                                 "no native equivalent")
            for s in inits:
                self.report(s.call, R.UNSUPPORTED, f"this module reads apex state `{private[1]}` that only "
                                                   "`amp.initialize` sets up: migrate the two together by hand "
                                                   "(e.g. `GradScaler(init_scale=...)`), then rerun")
            self.abort = True
        if len(inits) > 1 and not self.abort and not only_inference_inits(live):  # one forward each: no shared scaler
            why = amp_multi_init.shared_scaler_refusal(self, inits, live)  # a GAN's pairs share apex's one scaler
            if why is not None:
                for s in inits:
                    self.report(s.call, R.UNSUPPORTED, f"several `amp.initialize` calls in one module, and {why}: "
                                                       "migrate by hand")
                self.abort = True
        for s in inits:
            scope = next((a for a in self.index.ancestors(s.call) if isinstance(a, (cst.FunctionDef, cst.ClassDef))),
                         None)
            if isinstance(scope, cst.ClassDef) and not self.abort:
                # a scaler made there would be a class attribute, which the methods cannot read by its name
                self.report(s.call, R.UNSUPPORTED, "`amp.initialize` in a class body: migrate by hand")
                self.abort = True
