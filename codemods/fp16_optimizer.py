"""apex FP16_Optimizer -> fp32 model + torch.autocast + GradScaler (A2A501-A2A505): the pass of the
manual-scaling codemod that rewrites `opt = FP16_Optimizer(inner, static_loss_scale=S | dynamic_loss_scale=True)`
with `opt.backward(loss)`, `opt.clip_master_grads(n)` and `opt.step()` in one function (or class, for
`self.opt`), and reports the FP16_Optimizers it does not rewrite.

`Fp16OptimizerPass` is a mixin of manual_scaling._Migration: it reads the migration's module, parents,
res, calls, ctx, plan, gs/device, scaler_base and report/ok.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from .call_args import literal_bool
from .code_layout import as_primary
from .fp16_use_map import use_map
from . import fp16_branches, templates
from .names import assigned_names, code_of, dotted_name, norm_code, sole_call
from .scaling_shapes import (FUSED_FP16_OPT, MODEL_WRAPPERS, STATIC_INTERVAL, ancestors, autocast_maker, base_of,
                             block_of, calls_any, enclosing, parse_stmts, stmt_line, strip_casts, walk_all, within)


class Fp16OptimizerPass:
    """The FP16_Optimizer methods of manual_scaling._Migration."""

    def _other_fp16_optimizers(self, answered: Set[int]) -> None:
        """A2A502 at each FP16_Optimizer this codemod does not rewrite: apex < 0.1's FusedAdam wrapper
        (`apex.optimizers.FP16_Optimizer`) and a copy of apex's class imported from the project itself
        (`from fp16 import FP16_Optimizer`, a vendored fp16_utils; DeepSpeed's class of that name belongs
        to its engine and is left alone); the finding names the GradScaler the call's loss-scale arguments
        map to; `answered` holds the ids of the calls fused_fp16_optimizer migrated or reported."""
        for call in self.calls:
            q = self.res.apex_name(call.func)
            if id(call) in answered:
                continue
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
                clip = ("; clip_master_grads(n) becomes scaler.unscale_(optimizer) + clip_grad_norm_(..., n); "
                        "backward(loss, update_master_grads=False) and update_master_grads() go (GradScaler keeps no "
                        "master gradients); `optimizer.overflow` (the step was skipped) becomes `scaler.get_scale() < "
                        "scale_before_step`, `optimizer.loss_scale` becomes scaler.get_scale(); optimizer state_dict() "
                        "no longer holds the scaler: save scaler.state_dict() beside it; where the copy's "
                        "DynamicLossScaler keeps the scale >= 1 on overflow (`max(scale / factor, 1)`, see its "
                        "A2A146), add `if scaler.get_scale() < 1: scaler.update(1.0)` after scaler.update(). "
                        "The vendored "
                        f"`{copies[0].rpartition('.')[0]}` copy can be deleted once no file uses it (its A2A512)")
                init = "2.0**32"  # apex.fp16_utils' DynamicLossScaler default
            else:
                continue
            uses = use_map(self, call, self._fp16_target(call), "scaler") if q != FUSED_FP16_OPT else ""
            self.report(call, "A2A502", f"{what} is not rewritten: migrate by hand to an fp32 model (drop the "
                        f"fp16 casts / FP16_Module), torch.autocast around forward + loss, scaler = "
                        f"{self._fp16_scaler(call, init)}, optimizer.backward(loss) -> scaler.scale(loss).backward(), "
                        f"optimizer.step() -> scaler.step(optimizer); scaler.update(){clip}{uses}")

    def _fp16_target(self, call: cst.Call) -> Optional[str]:
        """The name (or `self.x`) of `T = FP16_Optimizer(...)`, else None."""
        stmt = stmt_line(call, self.parents)
        small = stmt.body[0] if stmt is not None and len(stmt.body) == 1 else None
        if isinstance(small, cst.Assign) and small.value is call and len(small.targets) == 1:
            return dotted_name(small.targets[0].target)
        return None

    def _fp16_scaler(self, call: cst.Call, init: str) -> str:
        """The GradScaler an FP16_Optimizer call's loss-scale arguments map to (placeholders where unknown)."""
        # fp16_utils' class (and its copies): the call's own settings, a conditional dynamic flag included
        exact = self._scaler_args(call)[0] if init == "2.0**32" else None
        if exact is not None:
            return f"{self.gs}(\"{self.device}\", {exact})"
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
        stmt = stmt_line(call, self.parents)
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
            scope = enclosing(stmt, self.parents, (cst.ClassDef,))
        else:
            scope = enclosing(stmt, self.parents, (cst.FunctionDef,)) or self.module
        if scope is None:
            return "self attribute outside a class"
        uses = [a for a in self._attrs_on(target) if within(scope, a, self.parents)]
        outside = [c for c in self.calls if isinstance(c.func, cst.Attribute)
                   and c.func.attr.value in ("backward", "clip_master_grads") and c.args
                   and not within(scope, c, self.parents) and c.func.attr.value == "clip_master_grads"]
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
                line = stmt_line(parent, self.parents)
                if sole_call(line) is not parent:
                    return "optimizer.backward(...) is not a statement of its own"
                backwards.append((line, parent.args[0].value))
            elif name == "step" and is_call:
                line = stmt_line(parent, self.parents)
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
        gate_if = fp16_branches.gate(stmt, self.parents)  # `if args.cuda and args.fp16: optimizer = FP16_Optimizer(...)`
        forward_names = set(model_names) | fp16_branches.aliases(self.module, set(model_names))
        for line, loss in backwards:
            # `if args.fp16: optimizer.backward(loss) else: loss.backward()`: the loss is computed around the `if`
            anchor = fp16_branches.branch_anchor(line, loss, self.parents, self.module, gate_if, self.index.positions)
            region = self._region(anchor or line, loss, forward_names)
            if isinstance(region, str):
                return region
            regions.append(region)
        if gate_if is not None and not self.ctx.options.use_scaler:
            return "the FP16_Optimizer is made under an `if` and bf16 has no scaler to carry that switch"
        # -- all recognised: plan the edits -----------------------------------------------
        scaler_name = f"self.{self.scaler_base}" if target.startswith("self.") else self.scaler_base
        self.needs_torch = True
        use_scaler = self.ctx.options.use_scaler
        inner = call.args[0].value
        assign: List[str] = []
        if code_of(inner) != target:
            assign.append(f"{target} = {code_of(inner)}")
        made = f"{scaler_name} = {self.gs}(\"{self.device}\", {scaler_args}"
        if use_scaler and gate_if is not None:
            # made before the gate, enabled where it holds: the lines both paths run step through it
            made_stmts = parse_stmts(f"{made}, enabled={code_of(gate_if.test)})\n")
            made_stmts[0] = made_stmts[0].with_changes(leading_lines=gate_if.leading_lines)
            self.plan.insert_before(gate_if, made_stmts)
        elif use_scaler:
            assign.append(made + ")")
        new_stmts = parse_stmts("\n".join(assign) + "\n") if assign else []
        if not new_stmts and gate_if is not None:
            self.plan.remove(gate_if)
        elif new_stmts:
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
            out = parse_stmts("\n".join(body) + "\n")
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
                line = stmt_line(c, self.parents)
                self.plan.insert_before(line, parse_stmts(f"{scaler_name}.unscale_({target})\n"))
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
            handled.update(id(c) for c in self.calls if within(node, c, self.parents)
                           and self.res.apex_name(c.func) in MODEL_WRAPPERS)
            if edit is None:
                self.plan.remove(node)
            else:
                self.plan.replace_node[node] = edit
            self.report(node, "A2A504", f"{what} removed: the model stays fp32 and autocast picks fp16 per op", fixed=True)
        for guard in (fp16_branches.float_only_off_fp16(self.module, set(model_names), fp16_branches.gate_flags(gate_if))
                      if gate_if is not None else []):
            self.plan.replace_stmt[guard] = [guard.body.body[0].with_changes(leading_lines=guard.leading_lines)]
            self.report(guard, "A2A504", "the fp32 cast of a restored model now runs in every mode: the model stays "
                        "fp32 (a checkpoint of the fp16 run holds a half model)", fixed=True)
        dtype = "float16" if use_scaler else "bfloat16"
        for region in regions:
            if region is None:
                continue
            first, last = region
            self.plan.wrap(first, last, autocast_maker(self.device, dtype, self.module.default_indent)
                           if gate_if is None else fp16_branches.autocast_maker(
                               self.device, dtype, self.module.default_indent, f"{scaler_name}.is_enabled()"))
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
            line = stmt_line(c, self.parents)
            if line is None or len(line.body) != 1:
                continue
            small = line.body[0]
            if isinstance(small, cst.Expr) and is_half:
                stripped = strip_casts(small.value, self.res)
                model = dotted_name(base_of(stripped))
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
            stripped = strip_casts(small.value, self.res)
            if stripped is small.value:
                continue
            src = dotted_name(base_of(stripped))
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
        for anc in ancestors(line, self.parents):
            if isinstance(anc, cst.With) and any("autocast" in (dotted_name(i.item.func) or "")
                                                 for i in anc.items if isinstance(i.item, cst.Call)):
                return None
        block = block_of(line, self.parents)
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
            if calls_any(block[i], models):
                start = i
                break
        for s in block[start:loss_idx + 1]:
            if any(isinstance(n, (cst.Return, cst.Yield)) for n in walk_all(s)) or not isinstance(
                    s, (cst.SimpleStatementLine, cst.If, cst.With, cst.For)):
                return "the forward pass cannot be wrapped in autocast as it is"
        return (block[start], block[loss_idx])

