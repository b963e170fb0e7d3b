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

from typing import Dict, List, Optional, Sequence, Set, Tuple

import libcst as cst

from . import dynamic_scaler, manual_fp16, templates
from .apex_names import Resolver
from .call_args import literal_bool
from .base import FIX, INFO, WARNING, Codemod, FileContext, rule
from .code_layout import as_primary, indent_continuations
from .edits import EditPlan, apply_plan
from .hazard_text import FileText
from .torch_import import ensure_torch
from .index import ModuleIndex, parent_mapping
from .names import assigned_names, code_of, dotted_name, literal_number, names_read, norm_code, sole_call
from .walk import Visitor

rule("A2A501", "fp16-optimizer", "apex FP16_Optimizer pattern -> fp32 model + autocast + GradScaler", fixes=True,
     severity=FIX,
     why="""
FP16_Optimizer kept fp32 master weights for an fp16 model and scaled the loss itself. Native AMP keeps
the model fp32, runs forward + loss under torch.autocast, and scales with GradScaler:
optimizer.backward(loss) -> scaler.scale(loss).backward(); clip_master_grads(n) -> scaler.unscale_ +
clip_grad_norm_; optimizer.step() -> scaler.step(optimizer); scaler.update(). The dynamic scaler is
matched (init_scale=2**32, growth_interval=1000); a static scale is approximated (see A2A503).""",
     before="""
import torch
from apex.fp16_utils import FP16_Optimizer, network_to_half


def train(model, optimizer, loader, criterion):
    model = network_to_half(model)
    optimizer = FP16_Optimizer(optimizer, dynamic_loss_scale=True)
    for x, y in loader:
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        optimizer.backward(loss)
        optimizer.step()""",
     after="""
import torch


def train(model, optimizer, loader, criterion):
    scaler = torch.amp.GradScaler("cuda", init_scale=2.0**32, growth_interval=1000)
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = criterion(model(x), y)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()""")
rule("A2A502", "fp16-optimizer-manual", "FP16_Optimizer / fp16_utils usage that is not rewritten automatically",
     fixes=False, severity=WARNING,
     why="""
The FP16_Optimizer pattern (or an fp16_utils helper such as network_to_half, prep_param_lists,
master_params_to_model_params) was found but not every piece is in one recognised shape (the optimizer
is passed to another function, .overflow is read, a closure is used, ...). Migrate by hand: keep the
model fp32, wrap forward + loss in torch.autocast, create one torch.amp.GradScaler, and use
scaler.scale(loss).backward(), scaler.unscale_(opt) before clipping, scaler.step(opt), scaler.update().""",
     before="optimizer = FP16_Optimizer(optimizer, dynamic_loss_scale=True)\ntrain(model, optimizer)",
     after="scaler = torch.amp.GradScaler(\"cuda\", init_scale=2.0**32, growth_interval=1000)\n"
           "train(model, optimizer, scaler)")
rule("A2A503", "static-loss-scale", "static loss scale approximated by GradScaler", fixes=False, severity=INFO,
     why="""
GradScaler has no static mode: it always skips a step whose gradients overflow and halves the scale,
whereas a static scale never skips. init_scale=S with growth_interval=2**30 keeps the scale at S
until an overflow happens.""",
     before="""
import torch
from apex.fp16_utils import FP16_Optimizer, network_to_half


def train(model, optimizer, loader, criterion):
    model = network_to_half(model)
    optimizer = FP16_Optimizer(optimizer, static_loss_scale=128.0)
    for x, y in loader:
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        optimizer.backward(loss)
        optimizer.step()""",
     after="""
import torch


def train(model, optimizer, loader, criterion):
    scaler = torch.amp.GradScaler("cuda", init_scale=128.0, growth_interval=2**30)
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = criterion(model(x), y)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()""")
rule("A2A504", "fp16-model-cast-removed", "fp16 model cast removed (the model stays fp32 under autocast)",
     fixes=True, severity=FIX,
     why="""
GradScaler refuses fp16 gradients, and autocast picks fp16 per op, so network_to_half(model),
FP16Model(model), model.half() and BN_convert_float(...) go. network_to_half wrapped the model in
nn.Sequential(tofp16(), model): state dict keys lose their "1." prefix.""",
     before="""
import torch
from apex.fp16_utils import FP16_Optimizer, network_to_half


def train(model, optimizer, loader, criterion):
    model = network_to_half(model)
    optimizer = FP16_Optimizer(optimizer, dynamic_loss_scale=True)
    for x, y in loader:
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        optimizer.backward(loss)
        optimizer.step()""",
     after="""
import torch


def train(model, optimizer, loader, criterion):
    scaler = torch.amp.GradScaler("cuda", init_scale=2.0**32, growth_interval=1000)
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = criterion(model(x), y)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()""")
rule("A2A505", "fp16-optimizer-state", "FP16_Optimizer state_dict / load_state_dict format changes", fixes=False,
     severity=WARNING,
     why="""
FP16_Optimizer.state_dict() held loss_scaler, dynamic_loss_scale, overflow, optimizer_state_dict and
fp32_from_fp16. After the migration the optimizer is the plain torch optimizer, so save
scaler.state_dict() beside it, and convert old checkpoints with `apex2amp convert-checkpoint`.""",
     before="torch.save({'optimizer': optimizer.state_dict()}, path)",
     after="torch.save({'optimizer': optimizer.state_dict(), 'scaler': scaler.state_dict()}, path)")
rule("A2A510", "manual-loss-scaling", "static manual loss scaling -> GradScaler", fixes=True, severity=FIX,
     why="""
`(loss * S).backward()` followed by dividing every gradient by S is what GradScaler does:
scaler.scale(loss).backward(), scaler.unscale_(optimizer) where the division was, scaler.step and
scaler.update(). init_scale=S with growth_interval=2**30 keeps the scale static until an overflow,
which GradScaler (unlike the hand-written code) skips.""",
     before="""
import torch


def train(model, optimizer, loader, criterion):
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        (loss * 128.0).backward()
        for p in model.parameters():
            p.grad.data.div_(128.0)
        optimizer.step()""",
     after="""
import torch


def train(model, optimizer, loader, criterion):
    scaler = torch.amp.GradScaler("cuda", init_scale=128.0, growth_interval=2**30)
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        scaler.step(optimizer)
        scaler.update()""")
rule("A2A511", "manual-loss-scaling-manual", "hand-written loss scaling not rewritten automatically", fixes=False,
     severity=WARNING,
     why="""
The loss is multiplied by a scale before backward, but the rest of the pattern (dynamic halving on
overflow, fp32 master copies of a .half() model, skipped steps) is not in a shape the tool proves
equivalent. Replace it with one torch.amp.GradScaler("cuda") (init_scale=S; growth_factor/backoff_factor/
growth_interval to match your scaler) and an fp32 model under torch.autocast.""",
     before="(loss * loss_scale).backward()\nif overflow: loss_scale /= 2; continue",
     after="scaler.scale(loss).backward()\nscaler.step(optimizer)\nscaler.update()")
rule("A2A512", "scaler-wrapper-class", "class that owns the scaled backward (scaler class / optimizer wrapper)",
     fixes=False, severity=WARNING,
     why="""
A class whose method scales the loss, calls backward and steps (a hand-written loss scaler or an
FP16_Optimizer-style wrapper) hides the pattern from the tool. Replace its body with a
torch.amp.GradScaler: scaler.scale(loss).backward(); scaler.unscale_(opt) (before clipping);
scaler.step(opt); scaler.update(); and keep the model fp32 under torch.autocast.""",
     before="class Scaler:\n    def __call__(self, loss, opt):\n        (loss * self.scale).backward()\n        ...",
     after="scaler = torch.amp.GradScaler(\"cuda\")")

FP16_OPT = "apex.fp16_utils.FP16_Optimizer"
FUSED_FP16_OPT = "apex.optimizers.FP16_Optimizer"  # apex < 0.1: FusedAdam's wrapper (it passed grad norms to step)
MODEL_WRAPPERS = {"apex.fp16_utils.network_to_half", "apex.fp16_utils.FP16Model", "apex.fp16_utils.BN_convert_float"}
MASTER_HELPERS = {"apex.fp16_utils.prep_param_lists", "apex.fp16_utils.model_grads_to_master_grads",
                  "apex.fp16_utils.master_params_to_model_params", "apex.fp16_utils.tofp16",
                  "apex.fp16_utils.convert_network", "apex.fp16_utils.convert_module",
                  "apex.fp16_utils.LossScaler", "apex.fp16_utils.DynamicLossScaler"}
STATIC_INTERVAL = "2**30"


def _stmt_line(node: cst.CSTNode, parents) -> Optional[cst.SimpleStatementLine]:
    n = node
    while n is not None and not isinstance(n, cst.SimpleStatementLine):
        if isinstance(n, cst.BaseCompoundStatement):
            return None
        n = parents.get(n)
    return n


def _enclosing(node: cst.CSTNode, parents, kinds) -> Optional[cst.CSTNode]:
    n = parents.get(node)
    while n is not None and not isinstance(n, kinds):
        n = parents.get(n)
    return n


def _block_of(stmt: cst.CSTNode, parents) -> Optional[Sequence[cst.CSTNode]]:
    p = parents.get(stmt)
    if isinstance(p, (cst.IndentedBlock, cst.Module)):
        return p.body
    return None


def _stmts(code: str) -> List[cst.BaseStatement]:
    return templates.statements(code)


class ManualLossScalingToGradScaler(Codemod):
    """hand-written loss scaling and FP16_Optimizer patterns -> GradScaler."""

    NAME = "manual_scaling"
    DESCRIPTION = "hand-written loss scaling and FP16_Optimizer patterns -> GradScaler"
    CODES = ("A2A501", "A2A502", "A2A503", "A2A504", "A2A505", "A2A510", "A2A511", "A2A512") + manual_fp16.CODES + \
        dynamic_scaler.CODES
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
        return new


class _Migration:
    def __init__(self, module: cst.Module, parents, ctx: FileContext, res: Resolver, index: ModuleIndex):
        self.module = module
        self.parents = parents
        self.ctx = ctx
        self.res = res
        self.index = index
        self.plan = EditPlan()
        self.needs_torch = False
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
                        "checks for inf/NaN and skips the step itself; no fp32 master copies)")

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
                            "scaler.unscale_(optimizer) before clipping, scaler.step(optimizer), scaler.update()")
        self._other_fp16_optimizers()
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
        if not fp16_opts and not helpers and not any(self.res.apex_name(c.func) in MODEL_WRAPPERS for c in self.calls):
            fp16 = manual_fp16.HandFp16(self)  # a `.half()` model trained by hand (2018 BERT fine-tuning style)
            fp16.run()
            self._by_hand_fp16 = fp16.handled
        if not fp16_opts:
            self._manual_scaling()
        self._wrapper_classes()

    # -- FP16_Optimizer -------------------------------------------------------------------
    def _other_fp16_optimizers(self) -> None:
        """A2A502 at each FP16_Optimizer this codemod does not rewrite: apex < 0.1's FusedAdam wrapper
        (`apex.optimizers.FP16_Optimizer`) and a copy of apex's class imported from the project itself
        (`from fp16 import FP16_Optimizer`, a vendored fp16_utils; DeepSpeed's class of that name belongs
        to its engine and is left alone); the finding names the GradScaler the call's loss-scale arguments
        map to."""
        for call in self.calls:
            q = self.res.apex_name(call.func)
            if q == FUSED_FP16_OPT:
                what = ("apex.optimizers.FP16_Optimizer (apex < 0.1's wrapper of FusedAdam, which it handed the "
                        "gradient norm for FusedAdam's max_grad_norm clip)")
                clip = ("; where FusedAdam had max_grad_norm, call torch.nn.utils.clip_grad_norm_(model.parameters(), "
                        "max_grad_norm) after scaler.unscale_(optimizer)")
                init = "2.0**16"  # that wrapper's dynamic scale started at 2**16 (window 1000, factor 2)
            elif q is None and not (isinstance(call.func, cst.Name) and call.func.value in self.res.defs):
                copies = sorted(n for n in self.res.names(call.func) if n.rsplit(".", 1)[-1] == "FP16_Optimizer"
                                and "." in n and not n.startswith(("apex.", "torch.", "deepspeed.")))
                if not copies:
                    continue
                what = (f"`{copies[0]}` (a copy of apex.fp16_utils.FP16_Optimizer in this project: fp32 master "
                        "weights of an fp16 model and a loss scaler)")
                clip = "; clip_master_grads(n) becomes scaler.unscale_(optimizer) + clip_grad_norm_(..., n)"
                init = "2.0**32"  # apex.fp16_utils' DynamicLossScaler default
            else:
                continue
            self.report(call, "A2A502", f"{what} is not rewritten: migrate by hand to an fp32 model (drop the "
                        f"fp16 casts / FP16_Module), torch.autocast around forward + loss, scaler = "
                        f"{self._fp16_scaler(call, init)}, optimizer.backward(loss) -> scaler.scale(loss).backward(), "
                        f"optimizer.step() -> scaler.step(optimizer); scaler.update(){clip}")

    def _fp16_scaler(self, call: cst.Call, init: str) -> str:
        """The GradScaler an FP16_Optimizer call's loss-scale arguments map to (placeholders where unknown)."""
        kw = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
        static = kw.get("static_loss_scale")
        if literal_bool(kw.get("dynamic_loss_scale")) is True:
            return f"{self.gs}(\"{self.device}\", init_scale={init}, growth_interval=1000)"
        if static is not None and "dynamic_loss_scale" not in kw:
            return f"{self.gs}(\"{self.device}\", init_scale={code_of(static)}, growth_interval={STATIC_INTERVAL})"
        return (f"{self.gs}(\"{self.device}\", init_scale={init}, growth_interval=1000) when the loss scale is "
                f"dynamic, else init_scale=<static_loss_scale>, growth_interval={STATIC_INTERVAL}")

    def _fp16_optimizer(self, call: cst.Call, handled: Set[int], blocked: bool) -> Optional[str]:
        if not self.ok(call, "A2A501"):
            return None
        if blocked:
            return "fp16_utils master-weight helpers are used in the same file"
        stmt = _stmt_line(call, self.parents)
        if stmt is None or len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.Assign) \
                or stmt.body[0].value is not call or len(stmt.body[0].targets) != 1:
            return "the call is not a plain `optimizer = FP16_Optimizer(...)` assignment"
        target = dotted_name(stmt.body[0].targets[0].target)
        if target is None or target.count(".") > 1 or ("." in target and not target.startswith("self.")):
            return "the result is not assigned to a name or self attribute"
        if any(a.star for a in call.args) or not call.args or call.args[0].keyword is not None:
            return "arguments not understood"
        scaler_args, note = self._scaler_args(call)
        if scaler_args is None:
            return note
        # scope: the function (or the class, for self.x) that owns the assignment
        if target.startswith("self."):
            scope = _enclosing(stmt, self.parents, (cst.ClassDef,))
        else:
            scope = _enclosing(stmt, self.parents, (cst.FunctionDef,)) or self.module
        if scope is None:
            return "self attribute outside a class"
        uses = [a for a in self._attrs_on(target) if _within(scope, a, self.parents)]
        outside = [c for c in self.calls if isinstance(c.func, cst.Attribute)
                   and c.func.attr.value in ("backward", "clip_master_grads") and c.args
                   and not _within(scope, c, self.parents) and c.func.attr.value == "clip_master_grads"]
        if outside:
            return "clip_master_grads is called outside the function that creates the optimizer"
        backwards, steps, clips, renames, states = [], [], [], [], []
        for a in uses:
            parent = self.parents.get(a)
            name = a.attr.value
            is_call = isinstance(parent, cst.Call) and parent.func is a
            if name == "backward" and is_call:
                if len(parent.args) != 1 or parent.args[0].keyword or parent.args[0].star:
                    return "optimizer.backward() is called with extra arguments"
                line = _stmt_line(parent, self.parents)
                if sole_call(line) is not parent:
                    return "optimizer.backward(...) is not a statement of its own"
                backwards.append((line, parent.args[0].value))
            elif name == "step" and is_call:
                line = _stmt_line(parent, self.parents)
                if parent.args or sole_call(line) is not parent:
                    return "optimizer.step() takes a closure or is used as a value"
                steps.append(line)
            elif name == "clip_master_grads" and is_call:
                if not parent.args or any(x.star for x in parent.args):
                    return "clip_master_grads arguments not understood"
                clips.append(parent)
            elif name == "optimizer":
                renames.append(a)
            elif name in ("state_dict", "load_state_dict"):
                states.append(a)
            elif name in ("zero_grad", "param_groups", "state", "add_param_group"):
                continue
            elif name == "loss_scale":
                renames.append(a)
            else:
                return f"optimizer.{name} has no GradScaler counterpart the tool can place (e.g. .overflow)"
        if not backwards or not steps:
            return "optimizer.backward(loss) and optimizer.step() are not both in the function that creates it"
        # model casts in the module
        model_names, cast_edits = self._model_casts()
        if cast_edits is None:
            return model_names  # type: ignore[return-value]
        # autocast regions
        regions = []
        for line, loss in backwards:
            region = self._region(line, loss, set(model_names))
            if isinstance(region, str):
                return region
            regions.append(region)
        # -- all recognised: plan the edits -----------------------------------------------
        scaler_name = f"self.{self.scaler_base}" if target.startswith("self.") else self.scaler_base
        self.needs_torch = True
        use_scaler = self.ctx.options.use_scaler
        inner = call.args[0].value
        assign: List[str] = []
        if code_of(inner) != target:
            assign.append(f"{target} = {code_of(inner)}")
        if use_scaler:
            assign.append(f"{scaler_name} = {self.gs}(\"{self.device}\", {scaler_args})")
        new_stmts = _stmts("\n".join(assign) + "\n") if assign else []
        if new_stmts:
            new_stmts[0] = new_stmts[0].with_changes(leading_lines=stmt.leading_lines)
            self.plan.replace_stmt[stmt] = new_stmts
        else:
            self.plan.remove(stmt)
        for line, loss in backwards:
            lc = code_of(loss)
            new = f"{scaler_name}.scale({lc}).backward()" if use_scaler else f"{code_of(as_primary(loss))}.backward()"
            self.plan.replace_stmt[line] = [line.with_changes(body=[cst.Expr(templates.expression(new))])]
        for line in steps:
            body = [f"{scaler_name}.step({target})", f"{scaler_name}.update()"] if use_scaler else [f"{target}.step()"]
            out = _stmts("\n".join(body) + "\n")
            out[0] = out[0].with_changes(leading_lines=line.leading_lines)
            if line.trailing_whitespace.comment:
                out[0] = out[0].with_changes(trailing_whitespace=line.trailing_whitespace)
            self.plan.replace_stmt[line] = out
        params = f"[p for group in {target}.param_groups for p in group[\"params\"]]"
        for c in clips:
            rest = ", ".join(code_of(a) for a in c.args).rstrip(", ")
            new = templates.expression(f"torch.nn.utils.clip_grad_norm_({params}, {rest})")
            self.plan.replace_node[c] = new
            if use_scaler:
                line = _stmt_line(c, self.parents)
                self.plan.insert_before(line, _stmts(f"{scaler_name}.unscale_({target})\n"))
        for a in renames:
            if a.attr.value == "optimizer":
                self.plan.replace_node[a] = templates.expression(target)
            else:
                self.plan.replace_node[a] = templates.expression(
                    f"{scaler_name}.get_scale()" if use_scaler else "1.0")
        for a in states:
            self.report(a, "A2A505", f"{target}.{a.attr.value}(): the optimizer state no longer holds the loss scaler; "
                        f"save/load {scaler_name}.state_dict() beside it and convert old checkpoints with "
                        "`apex2amp convert-checkpoint`")
        for node, edit, what in cast_edits:
            handled.update(id(c) for c in self.calls if _within(node, c, self.parents)
                           and self.res.apex_name(c.func) in MODEL_WRAPPERS)
            if edit is None:
                self.plan.remove(node)
            else:
                self.plan.replace_node[node] = edit
            self.report(node, "A2A504", f"{what} removed: the model stays fp32 and autocast picks fp16 per op", fixed=True)
        dtype = "float16" if use_scaler else "bfloat16"
        for region in regions:
            if region is None:
                continue
            first, last = region
            self.plan.wrap(first, last, _autocast_maker(self.device, dtype, self.module.default_indent))
        self.report(call, "A2A501", "FP16_Optimizer -> fp32 model + torch.autocast + "
                    + (f"{self.gs} ({note})" if use_scaler else "bf16 autocast without a scaler"), fixed=True)
        if use_scaler and "static" in note:
            self.report(call, "A2A503", f"static loss scale approximated: {note}", fixed=True)
        return None

    def _scaler_args(self, call: cst.Call) -> Tuple[Optional[str], str]:
        names = ("init_optimizer", "static_loss_scale", "dynamic_loss_scale", "dynamic_loss_args", "verbose")
        bound: Dict[str, cst.BaseExpression] = {}
        pos = 0
        for a in call.args:
            if a.keyword is None:
                if pos >= len(names):
                    return None, "too many arguments"
                bound[names[pos]] = a.value
                pos += 1
            elif a.keyword.value in names:
                bound[a.keyword.value] = a.value
            else:
                return None, f"unknown argument {a.keyword.value}"
        dyn = bound.get("dynamic_loss_scale")
        static = bound.get("static_loss_scale")
        static_code = code_of(static) if static is not None else "1.0"
        if dyn is not None and isinstance(dyn, cst.Name) and dyn.value in ("True", "False"):
            dyn_lit: Optional[bool] = dyn.value == "True"
        elif dyn is None:
            dyn_lit = False
        else:
            dyn_lit = None
        init, interval, factor = "2.0**32", "1000", None
        dargs = bound.get("dynamic_loss_args")
        if dargs is not None and not (isinstance(dargs, cst.Name) and dargs.value == "None"):
            if not isinstance(dargs, cst.Dict):
                return None, "dynamic_loss_args is not a literal dict"
            for el in dargs.elements:
                if not isinstance(el, cst.DictElement) or not isinstance(el.key, cst.SimpleString):
                    return None, "dynamic_loss_args is not a literal dict"
                k = el.key.evaluated_value
                if k == "init_scale":
                    init = code_of(el.value)
                elif k == "scale_window":
                    interval = code_of(el.value)
                elif k == "scale_factor":
                    factor = code_of(el.value)
                else:
                    return None, f"dynamic_loss_args key {k!r} has no GradScaler counterpart"
        dyn_kw = f"init_scale={init}, growth_interval={interval}"
        if factor is not None:
            dyn_kw += f", growth_factor={factor}, backoff_factor=1 / {factor}"
        if dyn_lit is True:
            return dyn_kw, "dynamic scaler matched: init_scale=2**32, growth_interval=1000, like FP16_Optimizer"
        if dyn_lit is False:
            return (f"init_scale={static_code}, growth_interval={STATIC_INTERVAL}",
                    f"static scale {static_code}: GradScaler still skips steps and halves on overflow")
        d = code_of(dyn)
        if factor is not None:
            return None, "a conditional dynamic_loss_scale with dynamic_loss_args"
        return (f"init_scale={init} if {d} else {static_code}, "
                f"growth_interval={interval} if {d} else {STATIC_INTERVAL}",
                f"dynamic when {d}, else static scale {static_code} (GradScaler still skips overflowing steps)")

    def _model_casts(self):
        """(model names, [(node, replacement or None for removal, description)]) or (reason, None)."""
        names: List[str] = []
        edits: List[Tuple[cst.CSTNode, Optional[cst.CSTNode], str]] = []
        for c in self.calls:
            q = self.res.apex_name(c.func)
            is_half = isinstance(c.func, cst.Attribute) and c.func.attr.value == "half" and not c.args
            if q not in MODEL_WRAPPERS and not is_half:
                continue
            line = _stmt_line(c, self.parents)
            if line is None or len(line.body) != 1:
                continue
            small = line.body[0]
            if isinstance(small, cst.Expr) and is_half:
                stripped = _strip_casts(small.value, self.res)
                model = dotted_name(_base_of(stripped))
                if stripped is not small.value and model and not any(e[0] is line for e in edits):
                    names.append(model)
                    if dotted_name(stripped):
                        edits.append((line, None, code_of(small.value).strip()))
                    else:
                        edits.append((small.value, stripped, code_of(small.value).strip()))
                continue
            if not (isinstance(small, cst.Assign) and len(small.targets) == 1):
                continue
            target = dotted_name(small.targets[0].target)
            if target is None:
                continue
            stripped = _strip_casts(small.value, self.res)
            if stripped is small.value:
                continue
            src = dotted_name(_base_of(stripped))
            if src != target and q is None:
                # input casts such as `x = batch.half()` stay (the hazard lint reports them)
                continue
            if any(e[0] is line for e in edits):
                continue
            names.append(target)
            if norm_code(stripped) == norm_code(small.targets[0].target):
                edits.append((line, None, code_of(small.value).strip()))
            else:
                edits.append((small.value, stripped, code_of(small.value).strip()))
        return names, edits

    def _region(self, line: cst.SimpleStatementLine, loss: cst.BaseExpression, models: Set[str]):
        """(first, last) statements to wrap in autocast, None when already under autocast, or a reason."""
        loss_name = dotted_name(loss)
        if loss_name is None:
            return "the loss passed to backward() is an expression, not a name"
        for anc in _ancestors(line, self.parents):
            if isinstance(anc, cst.With) and any("autocast" in (dotted_name(i.item.func) or "")
                                                 for i in anc.items if isinstance(i.item, cst.Call)):
                return None
        block = _block_of(line, self.parents)
        if block is None:
            return "optimizer.backward(loss) is not in a statement block"
        idx = next(i for i, s in enumerate(block) if s is line)
        loss_idx = None
        for i in range(idx - 1, -1, -1):
            if loss_name in assigned_names(block[i]):
                loss_idx = i
                break
        if loss_idx is None:
            return f"`{loss_name}` is not computed in the same block as optimizer.backward({loss_name})"
        start = loss_idx
        for i in range(loss_idx + 1):
            if _calls_any(block[i], models):
                start = i
                break
        for s in block[start:loss_idx + 1]:
            if any(isinstance(n, (cst.Return, cst.Yield)) for n in _walk(s)) or not isinstance(
                    s, (cst.SimpleStatementLine, cst.If, cst.With, cst.For)):
                return "the forward pass cannot be wrapped in autocast as it is"
        return (block[start], block[loss_idx])

    # -- static manual loss scaling ----------------------------------------------------------
    def _manual_scaling(self) -> None:
        for c in self.calls:
            if not (isinstance(c.func, cst.Attribute) and c.func.attr.value == "backward"):
                continue
            recv = c.func.value
            prod = recv if isinstance(recv, cst.BinaryOperation) else None
            scaled_stmt = None
            line = _stmt_line(c, self.parents)
            if line is None or sole_call(line) is not c or id(c) in self._by_hand_fp16:
                continue
            block = _block_of(line, self.parents)
            if block is None:
                continue
            idx = next(i for i, s in enumerate(block) if s is line)
            if prod is None and isinstance(recv, cst.Name) and idx > 0:
                prev = block[idx - 1]
                if isinstance(prev, cst.SimpleStatementLine) and len(prev.body) == 1 and isinstance(
                        prev.body[0], cst.Assign) and len(prev.body[0].targets) == 1 and dotted_name(
                        prev.body[0].targets[0].target) == recv.value and isinstance(prev.body[0].value,
                                                                                     cst.BinaryOperation):
                    prod = prev.body[0].value
                    scaled_stmt = prev
            if prod is None or not isinstance(prod.operator, cst.Multiply) or id(prod) in self._by_hand_fp16:
                continue
            parts = self._split_scale(prod)
            if parts is None:
                continue
            loss, scale = parts
            if not self.ok(c, "A2A510"):
                continue
            why = self._static_pattern(c, line, block, idx, loss, scale, scaled_stmt)
            if why:
                dynamic = self.dynamic.get((dotted_name(scale) or "").rpartition(".")[0])  # A2A146's mapping
                gs = dynamic or f"{self.gs}(\"{self.device}\", init_scale={code_of(scale)})"
                self.report(c, "A2A511", f"hand-written loss scaling (loss * {code_of(scale)}) not rewritten: {why}. "
                            f"Use scaler = {gs} with "
                            "scaler.scale(loss).backward(), scaler.unscale_(optimizer) where gradients are "
                            "divided, scaler.step(optimizer), scaler.update(), and an fp32 model under torch.autocast")

    def _read_elsewhere(self, assign: cst.CSTNode, backward_line: cst.CSTNode, scope: cst.CSTNode) -> bool:
        """Whether the name `assign` binds is read in `scope` other than by the backward line."""
        return any(self.index.names_within(assigned_names(assign), scope, (assign, backward_line)))

    def _split_scale(self, prod: cst.BinaryOperation):
        def is_scale(e: cst.BaseExpression) -> bool:
            v = literal_number(e)
            if v is not None:  # loss scales are powers of two (loss weights such as 2 or 10 are not)
                return v >= 8 and float(v).is_integer() and (int(v) & (int(v) - 1)) == 0
            n = dotted_name(e)
            return n is not None and "scale" in n.lower()
        if is_scale(prod.right) and not is_scale(prod.left):
            return prod.left, prod.right
        if is_scale(prod.left) and not is_scale(prod.right):
            return prod.right, prod.left
        return None

    def _static_pattern(self, call, line, block, idx, loss, scale, scaled_stmt) -> Optional[str]:
        func = _enclosing(line, self.parents, (cst.FunctionDef,))
        scope = func or self.module
        code = self._code_of(scope)
        if any(k in code for k in ("isinf", "isnan", "isfinite", "overflow")):
            return "the surrounding code checks for overflow (dynamic scaling): map its halving/growth to " \
                   "GradScaler's backoff_factor/growth_interval"
        if FileText.of(self.module).mentions_fp16():  # ".half()" or "float16" in the module's code
            return "the model or inputs are cast to fp16 by hand (fp32 master copies): keep the model fp32 " \
                   "under torch.autocast instead"
        sname = dotted_name(scale)
        if _enclosing(line, self.parents, (cst.ClassDef,)) is not None or (sname or "").startswith("self."):
            return "the scaling lives in a class (a scaler object or optimizer wrapper): see A2A512"
        if not any(isinstance(a, (cst.For, cst.While)) for a in _ancestors(line, self.parents)):
            return "the backward is not inside a training loop of this function, so there is no place for one scaler"
        if sname is not None:
            if id(scope) not in self._assigns:
                self._assigns[id(scope)] = [s for s in _walk(scope)
                                            if isinstance(s, (cst.Assign, cst.AugAssign, cst.AnnAssign))]
            assigns = [s for s in self._assigns[id(scope)] if sname in _targets(s)]
            if len(assigns) > 1 or any(isinstance(s, cst.AugAssign) for s in assigns):
                return f"{sname} changes during training (dynamic scaling)"
        # the unscale loop and the step
        loop_i = step_i = None
        opt = None
        for j in range(idx + 1, len(block)):
            s = block[j]
            if loop_i is None and isinstance(s, cst.For) and _divides_grads(s, scale):
                loop_i = j
                continue
            c = sole_call(s)
            if c is not None and isinstance(c.func, cst.Attribute) and c.func.attr.value == "step" and not c.args:
                step_i, opt = j, dotted_name(c.func.value)
                break
        if loop_i is None:
            return "no loop dividing every gradient by the scale before optimizer.step() in the same block"
        if step_i is None or opt is None:
            return "no optimizer.step() after the gradient division in the same block"
        # where the scaler is created: before the outermost loop around the backward, in the function
        anchor = line
        for anc in _ancestors(line, self.parents):
            if anc is scope:
                break
            if isinstance(anc, (cst.For, cst.While)):
                anchor = anc
        while self.parents.get(anchor) is not None and _block_of(anchor, self.parents) is None:
            anchor = self.parents.get(anchor)
        if sname is not None and any(sname in assigned_names(s) for s in _walk(anchor) if
                                     isinstance(s, cst.SimpleStatementLine)):
            return f"{sname} is assigned inside the training loop"
        self.needs_torch = True
        sc = self.scaler_base
        self.plan.insert_before(anchor, _stmts(
            f"{sc} = {self.gs}(\"{self.device}\", init_scale={code_of(scale)}, growth_interval={STATIC_INTERVAL})\n"))
        self.plan.replace_stmt[line] = [line.with_changes(body=[cst.Expr(templates.expression(
            f"{sc}.scale({code_of(loss)}).backward()"))])]
        if scaled_stmt is not None and not self._read_elsewhere(scaled_stmt, line, scope):
            self.plan.remove(scaled_stmt)  # kept when the scaled loss is also logged or returned
        loop = block[loop_i]
        self.plan.replace_stmt[loop] = [_stmts(f"{sc}.unscale_({opt})\n")[0].with_changes(
            leading_lines=loop.leading_lines)]
        step = block[step_i]
        out = _stmts(f"{sc}.step({opt})\n{sc}.update()\n")
        out[0] = out[0].with_changes(leading_lines=step.leading_lines)
        self.plan.replace_stmt[step] = out
        self.report(call, "A2A510", f"static loss scale {code_of(scale)} -> {self.gs} (init_scale={code_of(scale)}, "
                    f"growth_interval={STATIC_INTERVAL}); the gradient division became scaler.unscale_({opt})", fixed=True)
        self.report(call, "A2A503", f"static loss scale {code_of(scale)} approximated: GradScaler skips steps whose "
                    "gradients overflow and then halves the scale", fixed=True)
        return None

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
                            "scaler.unscale_(optimizer) before clipping, scaler.step(optimizer), scaler.update()")


# -- small tree helpers ------------------------------------------------------------------------


def _walk(node: cst.CSTNode) -> List[cst.CSTNode]:
    out: List[cst.CSTNode] = []

    class V(Visitor):
        def on_visit(self, n: cst.CSTNode) -> bool:
            out.append(n)
            return True

    node.visit(V())
    return out


def _within(outer: cst.CSTNode, inner: cst.CSTNode, parents) -> bool:
    n = inner
    while n is not None:
        if n is outer:
            return True
        n = parents.get(n)
    return False


def _ancestors(node: cst.CSTNode, parents):
    n = parents.get(node)
    while n is not None:
        yield n
        n = parents.get(n)


def _targets(s: cst.CSTNode) -> Set[str]:
    if isinstance(s, cst.Assign):
        return {dotted_name(t.target) or "" for t in s.targets}
    return {dotted_name(s.target) or ""}  # type: ignore[attr-defined]


def _calls_any(stmt: cst.CSTNode, names: Set[str]) -> bool:
    if not names:
        return False
    return any(isinstance(n, cst.Call) and (dotted_name(n.func) in names or (
        isinstance(n.func, cst.Attribute) and n.func.attr.value == "forward" and dotted_name(n.func.value) in names))
        for n in _walk(stmt))


def _base_of(e: cst.BaseExpression) -> cst.BaseExpression:
    """`model` of `model.cuda()` / `model.to(device)` chains."""
    while isinstance(e, cst.Call) and isinstance(e.func, cst.Attribute) and e.func.attr.value in ("cuda", "to", "cpu"):
        e = e.func.value
    return e


def _strip_casts(e: cst.BaseExpression, res: Resolver) -> cst.BaseExpression:
    """`e` without `.half()` calls and fp16_utils model wrappers (the same node when there are none)."""
    if isinstance(e, cst.Call):
        q = res.apex_name(e.func)
        if q in MODEL_WRAPPERS and len(e.args) == 1 and e.args[0].keyword is None:
            return _strip_casts(e.args[0].value, res)
        if isinstance(e.func, cst.Attribute):
            if e.func.attr.value == "half" and not e.args:
                return _strip_casts(e.func.value, res)
            inner = _strip_casts(e.func.value, res)
            if inner is not e.func.value and e.func.attr.value in ("cuda", "to", "cpu", "train", "eval"):
                return e.with_changes(func=e.func.with_changes(value=inner))
    return e


def _divides_grads(loop: cst.For, scale: cst.BaseExpression) -> bool:
    """`for p in ...: [if p.grad is not None:] p.grad(.data).div_(S)` / `/= S` / `.mul_(1/S)`."""
    var = dotted_name(loop.target)
    if var is None or not isinstance(loop.body, cst.IndentedBlock) or loop.orelse is not None:
        return False
    body = list(loop.body.body)
    if len(body) == 1 and isinstance(body[0], cst.If) and body[0].orelse is None and isinstance(
            body[0].body, cst.IndentedBlock) and "grad" in code_of(body[0].test):
        body = list(body[0].body.body)
    if len(body) != 1 or not isinstance(body[0], cst.SimpleStatementLine) or len(body[0].body) != 1:
        return False
    small = body[0].body[0]
    s = norm_code(scale)
    grads = {f"{var}.grad", f"{var}.grad.data"}
    if isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.DivideAssign):
        return dotted_name(small.target) in grads and norm_code(small.value) == s
    if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
        c = small.value
        if isinstance(c.func, cst.Attribute) and dotted_name(c.func.value) in grads and len(c.args) == 1:
            if c.func.attr.value == "div_":
                return norm_code(c.args[0].value) == s
            if c.func.attr.value == "mul_":
                return norm_code(c.args[0].value) in (f"1/{s}", f"1.0/{s}", f"1./{s}", f"(1/{s})", f"(1.0/{s})")
    return False


def _autocast_maker(device: str, dtype: str, indent: str):
    def make(stmts: List[cst.BaseStatement]) -> cst.BaseStatement:
        head = templates.statement(f"with torch.autocast(\"{device}\", dtype=torch.{dtype}):\n    pass\n")
        assert isinstance(head, cst.With)
        return head.with_changes(body=head.body.with_changes(body=indent_continuations(stmts, indent)))
    return make
