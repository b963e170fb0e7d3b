"""`amp.initialize` -> a GradScaler (enabled= from the conditions that guarded apex), or an autocast forward
without optimizers.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Set, Tuple

import libcst as cst

from . import amp_rules as R
from .bool_exprs import as_bool
from .opt_level_notes import opt_level_message
from .guards import apex_flags, apex_locals, fold_condition, is_const
from .walk import iter_nodes
from .names import (arg_by, assigned_names, dotted_name, has_star_args, literal_number,
                    literal_string, names_read, norm_code)
from .amp_plan_init_by_name import gated_caller, named_models, stored_on_self
from .amp_inference import o3_overrides, o3_statements, patched_models
from .amp_plan_state import AmpPlanState, AmpSite, code_of, parse_expr, flatten, parse_stmt


DROPPED_INIT_KWARGS = {"keep_batchnorm_fp32", "verbosity", "master_weights", "cast_model_type",
                       "patch_torch_functions", "num_losses", "patch_torch_functions_type"}
REPORTED_INIT_KWARGS = {"min_loss_scale", "max_loss_scale", "cast_model_outputs"}
# expressions that bind more loosely than an `and` operand / than the left side of `!=`
_LOOSER_THAN_AND = (cst.BooleanOperation, cst.IfExp, cst.Lambda, cst.NamedExpr)
_LOOSER_THAN_COMPARISON = _LOOSER_THAN_AND + (cst.Comparison, cst.UnaryOperation)


def _paren(e: cst.BaseExpression, looser: Tuple[type, ...] = _LOOSER_THAN_AND) -> cst.BaseExpression:
    """`e` in parentheses when it is one of the `looser` kinds and has none yet (`'O2' if fp16 else 'O0'`
    before `!= "O0"` would otherwise compare only `'O0'`)."""
    if isinstance(e, looser) and not e.lpar:
        return e.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return e


def _and(conds: Sequence[cst.BaseExpression]) -> Optional[cst.BaseExpression]:
    out: Optional[cst.BaseExpression] = None
    seen: Set[str] = set()
    for c in conds:
        key = norm_code(c)
        if key in seen:
            continue
        seen.add(key)
        if isinstance(c, cst.Name) and c.value == "True":
            continue
        c = c.with_changes(lpar=c.lpar, rpar=c.rpar)
        out = _paren(c) if out is None else cst.BooleanOperation(_paren(out), cst.And(), _paren(c))
    return out


FORWARD_HELPER = "autocast_forward"


FORWARD_HELPER_CODE = '''def autocast_forward(forward, device_type, dtype, enabled: bool = True):
    """`forward` run under torch.autocast, its floating-point tensor outputs cast back to fp32 (added by
    apex2amp). apex's `amp.initialize` without optimizers patched the model this way, so the loss and the
    metrics computed from its outputs ran in fp32."""

    def to_fp32(out):
        if isinstance(out, torch.Tensor):
            return out.float() if out.is_floating_point() else out
        if isinstance(out, tuple) and hasattr(out, "_fields"):
            return type(out)(*(to_fp32(o) for o in out))
        if isinstance(out, (list, tuple)):
            return type(out)(to_fp32(o) for o in out)
        if isinstance(out, dict):
            for key, value in out.items():
                out[key] = to_fp32(value)
        return out

    def run(*args, **kwargs):
        with torch.autocast(device_type, dtype=dtype, enabled=enabled):
            out = forward(*args, **kwargs)
        return to_fp32(out)

    return run
'''


def _probes_apex(node: cst.CSTNode) -> bool:
    """`importlib.util.find_spec("apex")`, `pkgutil.find_loader("apex")` and the like."""
    if type(node) is not cst.Call or not node.args:  # type: ignore[attr-defined]
        return False
    name = (dotted_name(node.func) or "").rpartition(".")[2]  # type: ignore[attr-defined]
    first = node.args[0].value  # type: ignore[attr-defined]
    return name in ("find_spec", "find_loader", "find_module") and isinstance(first, cst.SimpleString) \
        and first.evaluated_value.split(".")[0] == "apex"


class InitializePlanning(AmpPlanState):
    """The `amp.initialize` planning step of the amp analysis (codemods/amp.py)."""

    def plan_initialize(self, site: AmpSite) -> None:
        call = site.call
        stmt = site.stmt
        later = self.has_init  # several pairs in one block share the scaler (preflight checked them)
        if has_star_args(call) or any(a.keyword is None for a in call.args[2:]):
            self.report(call, R.UNSUPPORTED, "`amp.initialize` with *args or extra positional arguments: migrate by hand")
            self.abort = True
            return
        models = arg_by(call, 0, "models")
        opts = arg_by(call, 1, "optimizers")
        if models is None:
            self.report(call, R.UNSUPPORTED, "`amp.initialize` without models: migrate by hand")
            self.abort = True
            return
        target: Optional[cst.BaseExpression] = None
        small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
        if isinstance(small, cst.Assign) and small.value is call and len(small.targets) == 1:
            target = small.targets[0].target
        elif isinstance(small, cst.Expr) and small.value is call:
            target = None
        else:
            self.report(call, R.UNSUPPORTED, "`amp.initialize` result used in an expression: migrate by hand")
            self.abort = True
            return
        if opts is not None and target is not None and _empty_sequence(opts.value):
            tparts = _tuple_parts(target)
            if tparts is not None and len(tparts) == 2 and isinstance(tparts[1], cst.Name) and tparts[1].value == "_":
                # `model, _ = amp.initialize(model, [], ...)`: the inference form, apex's empty optimizer list dropped
                opts, target = None, tparts[0]
        source = models.value if opts is None else cst.Tuple(
            [cst.Element(models.value, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
             cst.Element(opts.value)], lpar=[], rpar=[])
        if target is not None:
            tparts = _tuple_parts(target)
            if opts is not None and (tparts is None or len(tparts) != 2):
                self.report(call, R.UNSUPPORTED, "`amp.initialize` with optimizers assigned to one name: migrate by hand")
                self.abort = True
                return
        # managed models / optimizers
        for e in flatten(models.value):
            self.models.add(norm_code(e))
        if target is not None:
            parts = _tuple_parts(target) if opts is not None else [target]
            for e in flatten(parts[0]):  # type: ignore[index]
                self.models.add(norm_code(e))
            if opts is not None:
                for e in flatten(parts[1]):  # type: ignore[index]
                    self.optimizers.add(norm_code(e))
        if opts is not None:
            for e in flatten(opts.value):
                self.optimizers.add(norm_code(e))
        self.models |= named_models(self, models.value, site.func)  # `[getattr(self, n) for n in self.NAMES]`
        # where the scaler lives
        func = site.func
        self.init_func = func
        if func is None:
            self.scaler_global = True
        elif target is not None and all(dotted_name(t) and dotted_name(t).startswith("self.")  # type: ignore[union-attr]
                                        for t in flatten(target)) and self.class_of(func) is not None:
            self.scaler_is_attr = True
        elif self.class_of(func) is not None and stored_on_self(self, stmt, target):
            self.scaler_is_attr = True  # locals the method then stores on `self` (models held by name)
        # enabled condition
        conds, outer = self.gate_of(stmt)
        probe = next((c for c in conds for n in iter_nodes(c) if _probes_apex(n)), None)
        if probe is not None:
            self.report(probe, R.LEFTOVER, f"`{code_of(probe)}` still tests whether apex is installed: "
                                           "without apex the migrated code under it never runs; drop that test")
        flags, locals_ = apex_flags(self.module, self.table), apex_locals(self.table)
        conds = [fold_condition(c, flags, locals_) for c in conds]
        conds = [c for c in conds if not is_const(c, True)]
        opt_level = arg_by(call, 99, "opt_level")
        enabled = arg_by(call, 99, "enabled")
        level = (literal_string(opt_level.value) or self._literal_set_before(stmt, opt_level.value)) \
            if opt_level else "O1"
        cond_list = list(conds)
        if enabled is not None:
            cond_list.append(enabled.value)
        if opt_level is not None and level is None:
            cond_list.append(cst.Comparison(_paren(opt_level.value, _LOOSER_THAN_COMPARISON), [cst.ComparisonTarget(
                cst.NotEqual(), cst.SimpleString('"O0"'))]))
        disabled = level == "O0"
        if disabled:
            cond_list = [parse_expr("False")]
        self.cond = as_bool(_and(cond_list), self.module)
        if conds and outer is not stmt and self.cond is not None:
            late = names_read(self.cond) & assigned_names(outer)
            if late:
                self.report(call, R.UNSUPPORTED, f"the scaler must exist before `{code_of(conds[0])}` is tested, but "
                                                 f"its enabled= would read `{min(late)}`, assigned only inside that "
                                                 "block: migrate this `amp.initialize` by hand")
                self.abort = True
                return
        # what the call itself says (its gates hold already where the call stood)
        own_cond = as_bool(_and(cond_list[len(conds):]), self.module)
        if opts is None and level == "O3":
            self._plan_o3_inference(call, stmt, target, models.value)
            return
        if level in ("O2", "O3"):
            self.report(call, R.OPT_LEVEL, opt_level_message(level, self.ctx.options.target))
        elif level in ("O4", "O5"):
            self.use_scaler = False
            self.dtype = "torch.bfloat16"
        # scaler arguments
        legacy_scaler = self.ctx.options.grad_scaler_callee.startswith("torch.cuda.")
        scaler_args: List[str] = [] if legacy_scaler else [f'"{self.device}"']
        ls = arg_by(call, 99, "loss_scale")
        scaler_off = False
        if ls is not None:
            num = literal_number(ls.value)
            s = literal_string(ls.value)
            if s is not None and s != "dynamic":
                try:
                    num = float(s)
                except ValueError:
                    num = None
            if s == "dynamic":
                pass
            elif num is not None:
                if num == 1.0:
                    scaler_off = True  # apex scaled by 1.0: casting on, no loss scaling
                else:
                    scaler_args.append(f"init_scale={code_of(ls.value) if s is None else repr(num)}")
                    scaler_args.append("growth_interval=2**30")
                self.report(ls, R.STATIC_SCALE, f"static loss_scale {code_of(ls.value)}: apex never skipped a step with "
                                                "a static scale; GradScaler skips steps with inf/NaN gradients")
            else:
                self.report(ls, R.STATIC_SCALE, f"loss_scale={code_of(ls.value)} is read from configuration: GradScaler "
                                                "keeps dynamic scaling (apex's defaults); for a static value S use "
                                                "init_scale=S, growth_interval=2**30")
        for a in call.args:
            if a.keyword is not None and a.keyword.value in REPORTED_INIT_KWARGS:
                self.report(a, R.OPTIONS, f"`{a.keyword.value}` has no GradScaler equivalent and was dropped")
        self.scaler_off = scaler_off
        if scaler_off:
            scaler_args.append("enabled=False")
        elif self.cond is not None:
            scaler_args.append(f"enabled={code_of(self.cond)}")
        self.has_init = True
        new_stmts: List[cst.BaseStatement] = []
        same = target is None or [norm_code(e) for e in flatten(target)] == [norm_code(e) for e in flatten(source)]
        if not same and target is not None:
            new_stmts.append(cst.SimpleStatementLine(body=[cst.Assign(
                targets=[cst.AssignTarget(target)], value=source)]))
        scaler_stmt: Optional[cst.BaseStatement] = None
        if opts is None:
            # inference form: no optimizer, no scaler; autocast the model's forward (spec 2.6 b)
            patched = patched_models(target, models.value)  # `[model] = amp.initialize([model])` too
            if patched is None:
                self.report(call, R.UNSUPPORTED, "`amp.initialize` of models without optimizers that are not plain "
                                                 "names (or a list of names assigned to as many names): wrap the "
                                                 "forward passes in `torch.autocast(...)` by hand")
                self.abort = True
                return
            enabled = f", enabled={code_of(own_cond)}" if own_cond is not None else ""
            for m in patched:
                mc = code_of(m)
                new_stmts.append(parse_stmt(f'{mc}.forward = {FORWARD_HELPER}({mc}.forward, "{self.device}", '
                                            f'{self.dtype}{enabled})'))
            self.needs_torch = self.needs_forward_helper = True
            self.use_scaler = False
            self.plan.replace_stmt[stmt] = new_stmts
            self.report(call, R.INITIALIZE, "`amp.initialize` without optimizers -> the model's forward runs under "
                                            f"autocast, outputs cast to fp32 (`{FORWARD_HELPER}`, added to this file; "
                                            "no scaler)", fixed=True)
            return
        if later:  # another pair of the same block (codemods/amp_multi_init.py): the first call made the scaler
            self.plan.replace_stmt[stmt] = new_stmts
            self.report(call, R.INITIALIZE, "`amp.initialize` of another model / optimizer pair -> the one "
                                            f"{'GradScaler' if self.use_scaler else 'autocast switch'} made at the "
                                            "first call (apex's calls shared one loss scaler)", fixed=True)
            return
        if self.use_scaler:
            made = f"{self.ctx.options.grad_scaler_callee}({', '.join(scaler_args)})"
            if self.loss_scalers is not None:  # apex's num_losses scalers, one per loss_id
                made = f"[{made} for _ in range({self.loss_scalers.count})]"
            scaler_stmt = parse_stmt(f"{self.scaler_target()} = {made}")
            self.needs_torch = True
        self.scaler_anchor = stmt if outer is stmt or not conds else outer
        if outer is stmt or not conds:
            self.plan.replace_stmt[stmt] = new_stmts + ([scaler_stmt] if scaler_stmt else [])
        else:
            self.plan.replace_stmt[stmt] = new_stmts
            if scaler_stmt:
                self.plan.insert_before(outer, [scaler_stmt])
        what = "GradScaler" if self.use_scaler else "bf16 autocast (no scaler)"
        self.report(call, R.INITIALIZE, f"`amp.initialize` -> {what}" + (
            f" (enabled={code_of(self.cond)})" if self.cond is not None else ""), fixed=True)
        gate = gated_caller(self, func) if self.scaler_is_attr and scaler_stmt is not None else None
        if gate is not None:
            # `if amp: self.init_amp()` in `__init__`: a disabled scaler before that gate, so the code the
            # other mode runs finds one (a plain step, no scaling), and autocast follows the scaler
            off = parse_stmt(f"{self.scaler_target()} = {self.ctx.options.grad_scaler_callee}("
                             f"{', '.join(scaler_args[:1] if not legacy_scaler else [])}"
                             f"{', ' if not legacy_scaler else ''}enabled=False)")
            self.plan.insert_before(gate, [off])
            self.cond = parse_expr(f"{self.scaler_expr()}.is_enabled()")

    def _plan_o3_inference(self, call: cst.Call, stmt: cst.CSTNode, target: Optional[cst.BaseExpression],
                           models: cst.BaseExpression) -> None:
        """`amp.initialize(model, opt_level="O3")` without optimizers: apex cast the model to fp16 (all its
        methods ran fp16, not only forward: waveglow's `infer` on `mel.half()`) and patched its forward
        (inputs to fp16, outputs to fp32); no loss scaling. An autocast forward cannot stand for that, so
        the call becomes `model.half()` and the same forward patch (`half_forward`, added to the file)."""
        kept = o3_overrides(call)
        patched = patched_models(target, models)
        if kept or patched is None:
            why = (f"with `{'`, `'.join(kept)}`" if kept else "of models that are not plain names (or a list of "
                   "names assigned to as many names)")
            self.report(call, R.UNSUPPORTED, f"`amp.initialize` without optimizers at O3 {why}: apex cast the "
                                             "model to fp16 (all its methods, not only forward); replace it by hand "
                                             "with `model.half()` (apex also cast forward's inputs to fp16 and its "
                                             "outputs to fp32), or run the model fp32 under `torch.autocast(...)` "
                                             "(the O1 recipe)")
            self.abort = True
            return
        same = target is None or [norm_code(e) for e in flatten(target)] == [norm_code(e) for e in flatten(models)]
        new_stmts: List[cst.BaseStatement] = []
        if not same:
            new_stmts.append(cst.SimpleStatementLine(body=[cst.Assign(targets=[cst.AssignTarget(target)],
                                                                      value=models)]))
        new_stmts += [parse_stmt(s) for s in o3_statements(patched)]
        self.plan.replace_stmt[stmt] = new_stmts
        self.needs_torch = self.needs_half_helper = True
        self.use_scaler = False
        self.has_init = True
        self.report(call, R.INITIALIZE, "`amp.initialize` without optimizers at O3 -> `.half()` on the model (apex "
                                        "cast it to fp16: every method runs fp16) and its forward patched as apex "
                                        "did (inputs to fp16, outputs to fp32; `half_forward`, added to this file; "
                                        "no scaler)", fixed=True)

    def _literal_set_before(self, stmt: cst.CSTNode, value: cst.BaseExpression) -> Optional[str]:
        """The string a plain name holds at `stmt` when the statement just before it in the same block
        set it (`opt_level = 'O2'` above `amp.initialize(..., opt_level=opt_level)`)."""
        if not isinstance(value, cst.Name):
            return None
        block, idx = self.block_of(stmt)
        body = list(getattr(block, "body", []))
        for prev in reversed(body[:idx]):
            if value.value not in assigned_names(prev):
                continue
            small = prev.body[0] if isinstance(prev, cst.SimpleStatementLine) and len(prev.body) == 1 else None
            if isinstance(small, cst.Assign) and len(small.targets) == 1 and \
                    isinstance(small.targets[0].target, cst.Name) and small.targets[0].target.value == value.value:
                return literal_string(small.value)
            return None
        return None


def _empty_sequence(node: cst.BaseExpression) -> bool:
    """`[]` or `()`."""
    return isinstance(node, (cst.List, cst.Tuple)) and not node.elements


def _tuple_parts(t: cst.BaseExpression) -> Optional[List[cst.BaseExpression]]:
    if isinstance(t, (cst.Tuple, cst.List)):
        return [e.value for e in t.elements]
    return None
