"""Static hand-written loss scaling -> GradScaler (A2A510, A2A511): the pass of the manual-scaling codemod
that rewrites `(loss * S).backward()` + a loop dividing every `p.grad` by S + `optimizer.step()` into
`scaler.scale(loss).backward()`, `scaler.unscale_(optimizer)` (where the division was), `scaler.step`,
`scaler.update`, and reports every other scaled backward with the GradScaler to use.

`StaticScalingPass` is a mixin of manual_scaling._Migration (module, parents, index, calls, ctx, plan,
gs/device, scaler_base, dynamic, report/ok).
"""
from __future__ import annotations

from typing import Optional

import libcst as cst

from . import templates
from .hazard_text import FileText
from .names import assigned_names, code_of, dotted_name, literal_number, sole_call
from .scaling_shapes import STATIC_INTERVAL, ancestors, block_of, divides_grads, enclosing, parse_stmts, stmt_line, \
    target_names, walk_all


class StaticScalingPass:
    """The static manual-scaling methods of manual_scaling._Migration."""

    def _manual_scaling(self) -> None:
        for c in self.calls:
            if not (isinstance(c.func, cst.Attribute) and c.func.attr.value == "backward"):
                continue
            recv = c.func.value
            prod = recv if isinstance(recv, cst.BinaryOperation) else None
            scaled_stmt = None
            line = stmt_line(c, self.parents)
            if line is None or sole_call(line) is not c or id(c) in self._by_hand_fp16:
                continue
            block = block_of(line, self.parents)
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
        func = enclosing(line, self.parents, (cst.FunctionDef,))
        scope = func or self.module
        code = self._code_of(scope)
        if any(k in code for k in ("isinf", "isnan", "isfinite", "overflow")):
            return "the surrounding code checks for overflow (dynamic scaling): map its halving/growth to " \
                   "GradScaler's backoff_factor/growth_interval"
        if FileText.of(self.module).mentions_fp16():  # ".half()" or "float16" in the module's code
            return "the model or inputs are cast to fp16 by hand (fp32 master copies): keep the model fp32 " \
                   "under torch.autocast instead"
        sname = dotted_name(scale)
        if enclosing(line, self.parents, (cst.ClassDef,)) is not None or (sname or "").startswith("self."):
            return "the scaling lives in a class (a scaler object or optimizer wrapper): see A2A512"
        if not any(isinstance(a, (cst.For, cst.While)) for a in ancestors(line, self.parents)):
            return "the backward is not inside a training loop of this function, so there is no place for one scaler"
        if sname is not None:
            if id(scope) not in self._assigns:
                self._assigns[id(scope)] = [s for s in walk_all(scope)
                                            if isinstance(s, (cst.Assign, cst.AugAssign, cst.AnnAssign))]
            assigns = [s for s in self._assigns[id(scope)] if sname in target_names(s)]
            if len(assigns) > 1 or any(isinstance(s, cst.AugAssign) for s in assigns):
                return f"{sname} changes during training (dynamic scaling)"
        # the unscale loop and the step
        loop_i = step_i = None
        opt = None
        for j in range(idx + 1, len(block)):
            s = block[j]
            if loop_i is None and isinstance(s, cst.For) and divides_grads(s, scale):
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
        for anc in ancestors(line, self.parents):
            if anc is scope:
                break
            if isinstance(anc, (cst.For, cst.While)):
                anchor = anc
        while self.parents.get(anchor) is not None and block_of(anchor, self.parents) is None:
            anchor = self.parents.get(anchor)
        if sname is not None and any(sname in assigned_names(s) for s in walk_all(anchor) if
                                     isinstance(s, cst.SimpleStatementLine)):
            return f"{sname} is assigned inside the training loop"
        self.needs_torch = True
        sc = self.scaler_base
        self.plan.insert_before(anchor, parse_stmts(
            f"{sc} = {self.gs}(\"{self.device}\", init_scale={code_of(scale)}, growth_interval={STATIC_INTERVAL})\n"))
        self.plan.replace_stmt[line] = [line.with_changes(body=[cst.Expr(templates.expression(
            f"{sc}.scale({code_of(loss)}).backward()"))])]
        if scaled_stmt is not None and not self._read_elsewhere(scaled_stmt, line, scope):
            self.plan.remove(scaled_stmt)  # kept when the scaled loss is also logged or returned
        loop = block[loop_i]
        self.plan.replace_stmt[loop] = [parse_stmts(f"{sc}.unscale_({opt})\n")[0].with_changes(
            leading_lines=loop.leading_lines)]
        step = block[step_i]
        out = parse_stmts(f"{sc}.step({opt})\n{sc}.update()\n")
        out[0] = out[0].with_changes(leading_lines=step.leading_lines)
        self.plan.replace_stmt[step] = out
        self.report(call, "A2A510", f"static loss scale {code_of(scale)} -> {self.gs} (init_scale={code_of(scale)}, "
                    f"growth_interval={STATIC_INTERVAL}); the gradient division became scaler.unscale_({opt})", fixed=True)
        self.report(call, "A2A503", f"static loss scale {code_of(scale)} approximated: GradScaler skips steps whose "
                    "gradients overflow and then halves the scale", fixed=True)
        return None

