"""Hand-written loss scaling and apex FP16_Optimizer patterns -> torch.amp.GradScaler.

Two patterns are rewritten, only when every piece is recognised in one module:

- FP16_Optimizer: `opt = FP16_Optimizer(inner, static_loss_scale=S | dynamic_loss_scale=True)` with
  `opt.backward(loss)`, `opt.clip_master_grads(n)` and `opt.step()` in the same function (or class,
  for `self.opt`), plus the fp16 model casts (`network_to_half`, `FP16Model`, `.half()`,
  `BN_convert_float`): fp32 model, autocast around forward + loss, and a GradScaler whose settings
  match FP16_Optimizer's DynamicLossScaler (init 2**32, window 1000) or the static scale.
- Static manual scaling: `(loss * S).backward()`, then a loop dividing every `p.grad` by S, then
  `optimizer.step()`: `scaler.scale(loss).backward()`, `scaler.unscale_(optimizer)`, `scaler.step`.

Everything else (dynamic hand-written scalers, fp32 master copies of a `.half()` model, scaler classes
and optimizer wrappers that own the backward) is reported with the concrete replacement.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Set

import libcst as cst

from . import dynamic_scaler, manual_fp16
from .apex_names import Resolver
from .base import Codemod, FileContext
from .edits import EditPlan, apply_plan
from .fp16_optimizer import Fp16OptimizerPass
from .fp16_use_map import use_map
from .fused_adam_legacy import add_helper_class
from .fused_fp16_optimizer import LegacyFp16Optimizer
from .torch_import import ensure_torch
from .index import ModuleIndex, parent_mapping
from .manual_scaling_rules import CODES as RULE_CODES
from .names import assigned_names, code_of, dotted_name, names_read
from .scaling_shapes import FP16_OPT, MASTER_HELPERS, MODEL_WRAPPERS
from .static_scaling import StaticScalingPass


class ManualLossScalingToGradScaler(Codemod):
    """hand-written loss scaling and FP16_Optimizer patterns -> GradScaler."""

    NAME = "manual_scaling"
    DESCRIPTION = "hand-written loss scaling and FP16_Optimizer patterns -> GradScaler"
    CODES = RULE_CODES + manual_fp16.CODES + \
        dynamic_scaler.CODES + ("A2A306",)
    TOKENS = (b"FP16_Optimizer", b"fp16_utils", b".backward(", b"network_to_half")

    def transform(self, wrapper: cst.MetadataWrapper, ctx: FileContext) -> cst.Module:
        module = wrapper.module
        res = Resolver.of(module, ctx.module_name)
        index = ModuleIndex.of(module)
        # every pattern needs an apex name (FP16_Optimizer, fp16_utils) or a `backward` (a `.backward(...)`
        # call, or a method named backward in a wrapper class): without either there is nothing to do
        if not res.has_apex and "backward" not in index.attr_values and "backward" not in index.name_values:
            return module
        m = _Migration(module, parent_mapping(module), ctx, res, index)
        m.run()
        if not m.plan:
            return module
        new = apply_plan(module, m.plan)
        if m.needs_torch:
            new = ensure_torch(new, m.res)
        if m.needs_legacy_adam:  # apex < 0.1's FusedAdam -> the LegacyFusedAdam port (codemods/fused_adam_legacy.py)
            new = add_helper_class(new)
        return new


class _Migration(Fp16OptimizerPass, StaticScalingPass):
    def __init__(self, module: cst.Module, parents, ctx: FileContext, res: Resolver, index: ModuleIndex):
        self.module = module
        self.parents = parents
        self.ctx = ctx
        self.res = res
        self.index = index
        self.plan = EditPlan()
        self.needs_torch = False
        self.needs_legacy_adam = False
        opts = ctx.options
        self.device = opts.device
        self.gs = opts.grad_scaler_callee
        self.calls: List[cst.Call] = index.calls
        self._scaler_base: Optional[str] = None
        self._code: Dict[int, str] = {}  # id(node) -> code_of(node), for the module and scopes
        self._assigns: Dict[int, List[cst.CSTNode]] = {}  # id(scope) -> its Assign/AugAssign/AnnAssign nodes
        self._by_hand_fp16: Set[int] = set()  # ids of nodes the hand-written fp16 pass answered for

    def report_dynamic_scalers(self) -> None:
        """A2A146 at each instance of a hand-written dynamic loss scaler class, naming its GradScaler;
        `self.dynamic` maps the instance's name to that call (for the loss-scale findings)."""
        self.dynamic: Dict[str, str] = {}
        if not self.ctx.enabled(dynamic_scaler.DYNAMIC_SCALER.code):
            return
        _, calls = dynamic_scaler.scalers(self.module)
        for call, sc in calls:
            gs = dynamic_scaler.mapping(call, sc, self.gs, self.device)
            parent = self.parents.get(call)
            target = dotted_name(parent.targets[0].target) if isinstance(parent, cst.Assign) and \
                len(parent.targets) == 1 else None
            if gs is None:
                self.report(call, "A2A146", f"{sc.name}: a hand-written dynamic loss scaler; its settings are not "
                            f"all known here: {self.gs}(\"{self.device}\", init_scale=<initial scale>, "
                            "growth_factor=<factor>, backoff_factor=1/<factor>, growth_interval=<window>)")
                continue
            if target:
                self.dynamic[target] = gs
            t = target or "scaler"
            self.report(call, "A2A146", f"{sc.name}: a hand-written dynamic loss scaler (divides `{sc.scale_attr}` "
                        f"on overflow, multiplies it after a window of clean iterations): "
                        f"{t} = {gs}, with the model kept fp32 under torch.autocast, "
                        f"{t}.scale(loss).backward(), {t}.step(optimizer), {t}.update() (GradScaler "
                        "checks for inf/NaN and skips the step itself; no fp32 master copies)"
                        + self._floor_note(call, sc, t))

    def _floor_note(self, call: cst.Call, sc, t: str) -> str:
        """What keeps a scaler's floor on overflow (`max(scale / factor, 1)`): GradScaler has none."""
        floor = dynamic_scaler.floor_of(call, sc)
        if floor is None:
            return ""
        if floor == "?":
            return (f". {sc.name} also keeps its scale above a floor on overflow (`max(...)`) that GradScaler "
                    f"lacks: after {t}.update(), reset the scale to that floor with {t}.update(float(<floor>)) when "
                    f"{t}.get_scale() falls below it")
        return (f". {sc.name} never lets the scale fall below {floor} on overflow (`max(scale / factor, {floor})`); "
                f"GradScaler has no floor: to keep it, after {t}.update() add `if {t}.get_scale() < {floor}: "
                f"{t}.update(float({floor}))` (update(new_scale) only sets the scale, and takes a float)")

    @property
    def scaler_base(self) -> str:
        """`scaler`, or `grad_scaler` when the module already uses the name `scaler`."""
        if self._scaler_base is None:
            used = names_read(self.module) | {n for s in self.module.body for n in assigned_names(s)} \
                if "scaler" in self.index.name_values else set()
            self._scaler_base = "grad_scaler" if "scaler" in used else "scaler"
        return self._scaler_base

    def _code_of(self, node: cst.CSTNode) -> str:
        code = self._code.get(id(node))
        if code is None:
            code = self._code[id(node)] = code_of(node)
        return code

    def _attrs_on(self, target: str) -> List[cst.Attribute]:
        """Attributes `target.x` (target a name or `self.name`) in tree order: the ones whose value spells target."""
        head, *rest = target.split(".")
        out: List[cst.Attribute] = []
        for n in self.index.names:
            if n.value != head:
                continue
            node: cst.CSTNode = n
            for part in rest:
                p = self.parents.get(node)
                if not (isinstance(p, cst.Attribute) and p.value is node and p.attr.value == part):
                    break
                node = p
            else:
                p = self.parents.get(node)
                if isinstance(p, cst.Attribute) and p.value is node:
                    out.append(p)
        return out

    def ok(self, node: cst.CSTNode, code: str) -> bool:
        return self.ctx.enabled(code) and not self.ctx.suppressed(node, code)

    def report(self, node, code, msg, fixed=False):
        if self.ctx.enabled(code) and not (not fixed and self.ctx.suppressed(node, code)):
            self.ctx.report(node, code, msg, fixed=fixed)

    def run(self) -> None:
        self.report_dynamic_scalers()
        handled_model_casts: Set[int] = set()
        fp16_opts = [c for c in self.calls if self.res.apex_name(c.func) == FP16_OPT]
        helpers = [c for c in self.calls if self.res.apex_name(c.func) in MASTER_HELPERS]
        for call in fp16_opts:
            why = self._fp16_optimizer(call, handled_model_casts, blocked=bool(helpers))
            if why:
                self.report(call, "A2A502", f"FP16_Optimizer not rewritten: {why}. Migrate by hand: fp32 model, "
                            f"torch.autocast around forward + loss, scaler = {self.gs}(\"{self.device}\", "
                            "init_scale=2.0**32, growth_interval=1000), scaler.scale(loss).backward(), "
                            "scaler.unscale_(optimizer) before clipping, scaler.step(optimizer), scaler.update()"
                            + use_map(self, call, self._fp16_target(call), "scaler"))
        legacy = LegacyFp16Optimizer(self).run()  # apex < 0.1's FP16_Optimizer wrappers it migrated or reported
        self._other_fp16_optimizers(legacy)
        for call in helpers:
            name = (self.res.apex_name(call.func) or "").rsplit(".", 1)[-1]
            self.report(call, "A2A502", f"{name}: hand-made fp32 master weights / loss scaler from apex.fp16_utils; "
                        "keep the model fp32 (no master copies), use torch.autocast and torch.amp.GradScaler")
        for call in self.calls:
            q = self.res.apex_name(call.func)
            if q in MODEL_WRAPPERS and id(call) not in handled_model_casts:
                self.report(call, "A2A502", f"{q.rsplit('.', 1)[1]}: keep the model fp32 and run forward + loss under "
                            "torch.autocast (GradScaler rejects fp16 gradients); network_to_half also changed "
                            "state_dict keys (prefix '1.')")
        if not fp16_opts and not helpers and not legacy \
                and not any(self.res.apex_name(c.func) in MODEL_WRAPPERS for c in self.calls):
            fp16 = manual_fp16.HandFp16(self)  # a `.half()` model trained by hand (2018 BERT fine-tuning style)
            fp16.run()
            self._by_hand_fp16 = fp16.handled
        if not fp16_opts:
            self._manual_scaling()
        self._wrapper_classes()

    # -- wrapper classes ---------------------------------------------------------------------
    def _wrapper_classes(self) -> None:
        # `(x * y).backward(...)` calls: the only calls that can make a class own the scaled backward
        scaled = [c for c in self.calls if isinstance(c.func, cst.Attribute) and c.func.attr.value == "backward"
                  and isinstance(c.func.value, cst.BinaryOperation) and isinstance(c.func.value.operator, cst.Multiply)]
        for cls in self.index.classes:
            methods = {f.name.value for f in cls.body.body if isinstance(f, cst.FunctionDef)} \
                if isinstance(cls.body, cst.IndentedBlock) else set()
            inside = [c for c in scaled if self.index.contains(cls, c)]
            if not inside and not {"backward", "step"} <= methods:
                continue  # cannot own the backward (cheap test before generating the class's code)
            code = code_of(cls)
            if "GradScaler" in code or ".backward(" not in code:
                continue
            owns = False
            for c in inside:
                if "scale" in code_of(c.func.value).lower():
                    owns = True
            if {"backward", "step"} <= methods and ("clip_master_grads" in methods or "loss_scale" in code):
                owns = True
            if owns:
                self.report(cls, "A2A512", f"class {cls.name.value} scales the loss and owns the backward: replace "
                            f"it with {self.gs}(\"{self.device}\"): scaler.scale(loss).backward(), "
                            "scaler.unscale_(optimizer) before clipping, scaler.step(optimizer), scaler.update()"
                            + self._vendored_note(cls, methods) + self._fairseq_note(code, methods))

    def _fairseq_note(self, code: str, methods: Set[str]) -> str:
        """For a fairseq-style FP16Optimizer (flat fp32 master copy, clip_grad_norm that updates the scale and
        raises OverflowError to skip the update, FloatingPointError at min_loss_scale): each method's counterpart."""
        if not ({"backward", "clip_grad_norm"} <= methods and "OverflowError" in code and "min_loss_scale" in code):
            return ""
        return (". Method by method (a fairseq-style wrapper whose trainer catches OverflowError to skip the "
                "update): keep the model fp32 (no .half()) with forward + loss under torch.autocast(\"cuda\", "
                "dtype=torch.float16, enabled=args.fp16); optimizer.backward(loss) -> scaler.scale(loss).backward(); "
                "multiply_grads(c) and clip_grad_norm(n) -> scaler.unscale_(optimizer) once, then multiply the "
                "gradients by c and clip_grad_norm_(params, n); optimizer.step() -> scaler.step(optimizer) then "
                "scaler.update() (an inf/NaN gradient skips the step, as OverflowError did: the trainer's skip "
                "count becomes scaler.get_scale() < the scale before the step); the min_loss_scale abort -> after "
                "scaler.update(), raise FloatingPointError when a step was skipped and scaler.get_scale() <= "
                "args.min_loss_scale; state_dict()['loss_scale'] -> save scaler.state_dict() beside the "
                "optimizer's (an old checkpoint's loss_scale becomes the GradScaler's init_scale)")

    def _vendored_note(self, cls: cst.ClassDef, methods: Set[str]) -> str:
        """For a project's own copy of apex.fp16_utils.FP16_Optimizer: which callers keep it, and when it can go."""
        name = cls.name.value
        if name != "FP16_Optimizer" or not {"backward", "step", "clip_master_grads"} <= methods:
            return ""
        mod = self.ctx.module_name
        spell = [f"`from {m} import {name}`" for m in (mod, mod.rpartition(".")[0]) if m]
        return (f". This is a copy of apex.fp16_utils.FP16_Optimizer kept in the project; the files that import it "
                f"({' or '.join(spell) or 'by name'}) each carry an A2A502 finding at their `{name}(...)` with the "
                "hand migration (fp32 model without FP16_Module, torch.autocast, GradScaler). It is only needed "
                "while one of them remains: once none imports it, delete this file with its loss scaler and "
                "fp16 helpers")
