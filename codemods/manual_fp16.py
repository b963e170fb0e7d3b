"""Hand-written fp16 training (a `.half()` model, fp32 master copies, a loss scale kept by hand).

The 2018 BERT fine-tuning shape is migrated when all of it sits in one function, under one flag F
(`args.fp16`) and one scale S (`args.loss_scale`):

    if F: M.half()                                       -> removed
    if F: P = [(n, p.clone()...float()...) ...M.named_parameters()]
    else: P = list(M.named_parameters())                 -> the else branch
    L = M(...)                                           -> with torch.autocast(..., enabled=F): L = M(...)
    if F [and S != 1.0]: L = L * S                       -> removed
    L.backward()                                         -> scaler.scale(L).backward()
    if F: [for p in M.parameters(): p.grad... / S]
          N = H1(P, M.named_parameters(), test_nan=True)
          if N: [log]; S = S / 2; [zero_grad]; continue
          O.step(); H2(M.named_parameters(), P)
    else: O.step()                                       -> scaler.step(O); scaler.update()
    def H1 / def H2 (this module, used nowhere else)     -> removed

plus `scaler = GradScaler(init_scale=S, growth_interval=2**30, backoff_factor=0.5, enabled=F)` before
the training loop. Anything else in a file that casts a model with `.half()` is reported at each site
(A2A507 the cast, A2A508 the master copies and their helpers, A2A509 the loss multiplication, the
gradient division and the halving on NaN), and the code stays as it is.
"""
from __future__ import annotations

from typing import List, Optional, Set, Tuple

import libcst as cst

from . import templates
from .fp16_shapes import (LOG_ROOTS, flag_autocast_maker, grad_division, halves, one_stmt,
                          params_call, scaled_operand)
from .manual_fp16_findings import HandFp16Findings
from .manual_fp16_rules import CODES
from .names import assigned_names, code_of, dotted_name, literal_number, names_read, norm_code, sole_call
from .scaling_shapes import STATIC_INTERVAL, walk_all

__all__ = ["CODES", "HandFp16"]


class HandFp16(HandFp16Findings):
    """Finds, and where it can migrates, hand-written fp16 training in one module.

    `mig` is the manual-scaling codemod's `_Migration` (plan, parents, index, report, options)."""

    def __init__(self, mig) -> None:
        self.mig = mig
        self.module: cst.Module = mig.module
        self.parents = mig.parents
        self.calls: List[cst.Call] = mig.calls
        self.handled: Set[int] = set()  # ids of nodes (products, backward calls) this pass answered for
        self._models: Optional[Set[str]] = None

    # -- what is hand-made fp16 --------------------------------------------------------------
    @property
    def models(self) -> Set[str]:
        """Names whose `.parameters()` / `.named_parameters()` the module calls."""
        if self._models is None:
            self._models = {m for m in (params_call(c) for c in self.calls) if m}
        return self._models

    def model_casts(self) -> List[Tuple[cst.Call, str, cst.SimpleStatementLine]]:
        """(the `.half()` call, the model, its statement) of `M.half()`, `M = M.half()`, `return M.half()`
        (with .cuda()/.to() around), M a name whose parameters the module reads."""
        out = []
        for c in self.calls:
            if not (isinstance(c.func, cst.Attribute) and c.func.attr.value == "half" and not c.args):
                continue
            line = self._line_of(c)
            if line is None or len(line.body) != 1:
                continue
            base = c.func.value
            while isinstance(base, cst.Call) and isinstance(base.func, cst.Attribute) \
                    and base.func.attr.value in ("cuda", "to", "cpu"):
                base = base.func.value
            model = dotted_name(base)
            if model is None or model not in self.models:
                continue
            small = line.body[0]
            if isinstance(small, (cst.Expr, cst.Return)) or (isinstance(small, cst.Assign) and len(small.targets) == 1
                                                             and dotted_name(small.targets[0].target) == model):
                out.append((c, model, line))
        return out

    def _line_of(self, node: cst.CSTNode) -> Optional[cst.SimpleStatementLine]:
        n = node
        while n is not None and not isinstance(n, cst.SimpleStatementLine):
            if isinstance(n, cst.BaseCompoundStatement):
                return None
            n = self.parents.get(n)
        return n

    def _ancestors(self, node: cst.CSTNode):
        n = self.parents.get(node)
        while n is not None:
            yield n
            n = self.parents.get(n)

    def _function(self, node: cst.CSTNode) -> Optional[cst.FunctionDef]:
        return next((a for a in self._ancestors(node) if isinstance(a, cst.FunctionDef)), None)

    def _block(self, stmt: cst.CSTNode) -> Optional[List[cst.CSTNode]]:
        p = self.parents.get(stmt)
        return list(p.body) if isinstance(p, (cst.IndentedBlock, cst.Module)) else None

    # -- the run -----------------------------------------------------------------------------
    def run(self) -> None:
        casts = self.model_casts()
        code = self.mig.index.code
        if not casts or "autocast" in code or "GradScaler" in code:
            return  # native AMP code: a `.half()` left there is the hazard lint's (A2A604)
        if not (self._loss_products() or self._master_copies()
                or any(isinstance(n, cst.For) and grad_division(n) for n in walk_all(self.module))):
            return  # a `.half()` model, but no sign of training it by hand
        reason = self._migrate(casts) if self.mig.ok(casts[0][0], "A2A506") else "A2A506 is not selected here"
        if reason is not None:
            self._report_sites(casts, reason)

    # -- findings only -------------------------------------------------------------------------
    def _migrate(self, casts) -> Optional[str]:
        """Plan the whole migration and return None, or the reason it is not provably right."""
        if len(casts) != 1:
            return "the model is cast to fp16 in more than one place"
        cast, model, cast_line = casts[0]
        halves = [c for c in self.calls if isinstance(c.func, cst.Attribute) and c.func.attr.value == "half"]
        code = self.mig.index.code
        if len(halves) != 1 or "float16" in code or "HalfTensor" in code or "torch.half" in code:
            return "other tensors are cast to fp16 too (they would meet an fp32 model)"
        func = self._function(cast)
        if func is None:
            return "the cast is not inside a function"
        cast_if = self.parents.get(self.parents.get(cast_line))
        if not (isinstance(cast_if, cst.If) and cast_if.orelse is None and one_stmt(cast_if.body) is cast_line.body[0]):
            return f"{model}.half() is not alone under an `if <fp16 flag>:`"
        flag = dotted_name(cast_if.test)
        if flag is None:
            return "the fp16 flag is not a name"
        fnodes = walk_all(func)
        ifs = [n for n in fnodes if isinstance(n, cst.If)]
        # fp32 master copies: `if F: P = <copies> else: P = <the model's parameters>`
        copy_ifs = [i for i in ifs if norm_code(i.test) == flag and i is not cast_if
                    and any(isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute) and n.func.attr.value == "float"
                            for n in walk_all(i.body))
                    and any(params_call(n, model) for n in walk_all(i.body))]
        if len(copy_ifs) != 1:
            return f"no single `if {flag}:` making fp32 master copies of {model}'s parameters"
        copy_if = copy_ifs[0]
        first = one_stmt(copy_if.body)
        if not (isinstance(first, cst.Assign) and len(first.targets) == 1 and dotted_name(first.targets[0].target)):
            return "the master copies are not one assignment"
        master = dotted_name(first.targets[0].target)
        if isinstance(copy_if.orelse, cst.If):
            return (f"the fp32 master copies ({master}) also serve another mode ({code_of(copy_if.orelse.test)}), "
                    "so the copy helpers cannot go")
        other = one_stmt(copy_if.orelse.body) if isinstance(copy_if.orelse, cst.Else) else None
        if not (isinstance(other, cst.Assign) and len(other.targets) == 1
                and dotted_name(other.targets[0].target) == master
                and any(params_call(n, model) for n in walk_all(other.value))
                and not any(isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute)
                            and n.func.attr.value in ("float", "clone", "detach", "half", "to", "cpu", "cuda")
                            for n in walk_all(other.value))):
            return f"the fp32 path does not build {master} from {model}'s own parameters"
        # the scaled loss: `if F [and S != 1]: L = L * S`, then `L.backward()` in the same block
        scale_ifs = []
        for i in ifs:
            small = one_stmt(i.body)
            parts = scaled_operand(small.value) if isinstance(small, cst.Assign) and len(small.targets) == 1 else None
            if parts and i.orelse is None and norm_code(small.targets[0].target) == norm_code(parts[0]) \
                    and self._flag_test(i.test, flag, dotted_name(parts[1])):
                scale_ifs.append((i, dotted_name(parts[0]), dotted_name(parts[1])))
        if len(scale_ifs) != 1 or None in scale_ifs[0]:
            return f"no single `if {flag}: loss = loss * <scale>`"
        scale_if, loss, scale = scale_ifs[0]
        block = self._block(scale_if)
        if block is None:
            return "the loss scaling is not in a statement block"
        k = block.index(scale_if)
        back_i = next((j for j in range(k + 1, len(block)) if self._backward_of(block[j], loss)), None)
        if back_i is None:
            return f"{loss}.backward() does not follow the scaling in the same block"
        for s in block[k + 1:back_i]:
            c = code_of(s)
            if scale in c or flag in c:
                return "code between the scaling and the backward reads the scale or the fp16 flag"
        back_line = block[back_i]
        backs = [c for c in self.calls if self.mig.index.contains(func, c) and isinstance(c.func, cst.Attribute)
                 and c.func.attr.value == "backward"]
        if len(backs) != 1:
            return "the function calls backward() more than once"
        # the forward + loss region to wrap in autocast
        start = next((j for j in range(k) if self._calls_model(block[j], model)), None)
        if start is None:
            return f"the forward pass ({model}(...)) is not in the block of the loss scaling"
        end = next((j for j in range(start, k) if loss in assigned_names(block[j])), None)
        if end is None:
            return f"{loss} is not computed after the forward in the same block"
        for s in block[start:end + 1]:
            if not isinstance(s, cst.SimpleStatementLine):
                return "the forward pass cannot be wrapped in autocast as it is"
        if any(isinstance(a, cst.With) and "autocast" in code_of(a.items[0]) for a in self._ancestors(back_line)):
            return "the forward already runs under autocast"
        loops = [a for a in self._ancestors(back_line) if isinstance(a, (cst.For, cst.While))
                 and self.mig.index.contains(func, a)]
        if not loops:
            return "the backward is not inside a training loop"
        loop = loops[0]
        # the step under the flag
        step_ifs = [i for i in ifs if norm_code(i.test) == flag and self.mig.index.contains(loop, i)
                    and i is not scale_if]
        if len(step_ifs) != 1:
            return f"no single `if {flag}:` around the optimizer step in the training loop"
        step_if = step_ifs[0]
        found = self._step_shape(step_if, flag, model, master, scale, loop)
        if isinstance(found, str):
            return found
        opt, h1, h2, nan_name, dropped = found
        # the scale is read only by the recognised sites
        sites = (scale_if, step_if)
        for a in (n for n in fnodes if isinstance(n, (cst.Attribute, cst.Name))):
            if dotted_name(a) == scale and not any(self.mig.index.contains(s, a) for s in sites):
                return f"{scale} is read outside the recognised scaling (it no longer changes after the migration)"
        if any(n.value == nan_name for n in self.mig.index.names_within({nan_name}, func, (step_if,))):
            return f"{nan_name} is read outside the step"
        helper_defs = []
        for h, what in ((h1, ("grad", "isnan")), (h2, ("copy_",))):
            d = next((s for s in self.module.body if isinstance(s, cst.FunctionDef) and s.name.value == h), None)
            if d is None:
                return f"{h} is not defined in this module, so the tool cannot check it only copies"
            body = code_of(d.body)
            if not all(w in body for w in what):
                return f"{h} does more than copy between the model and its master copies"
            if not any(n.value == h for n in self.mig.index.names_within({h}, self.module, (step_if, d))):
                helper_defs.append(d)
        # -- all recognised: plan the edits -------------------------------------------------------
        self._plan(cast_if, copy_if, other, block, start, end, scale_if, back_line, loss, step_if, opt, loops,
                   func, flag, scale, helper_defs, dropped)
        return None

    def _flag_test(self, test: cst.BaseExpression, flag: str, scale: Optional[str]) -> bool:
        """`F`, or `F and S != 1.0`."""
        if norm_code(test) == flag:
            return True
        return isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And) \
            and norm_code(test.left) == flag and self._scale_not_one(test.right, scale)

    @staticmethod
    def _scale_not_one(test: cst.BaseExpression, scale: Optional[str]) -> bool:
        return isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and isinstance(
            test.comparisons[0].operator, cst.NotEqual) and dotted_name(test.left) == scale \
            and literal_number(test.comparisons[0].comparator) == 1

    @staticmethod
    def _backward_of(stmt: cst.CSTNode, loss: str) -> bool:
        c = sole_call(stmt)
        return c is not None and not c.args and isinstance(c.func, cst.Attribute) and c.func.attr.value == "backward" \
            and dotted_name(c.func.value) == loss

    @staticmethod
    def _calls_model(stmt: cst.CSTNode, model: str) -> bool:
        return any(isinstance(n, cst.Call) and (dotted_name(n.func) == model or (
            isinstance(n.func, cst.Attribute) and n.func.attr.value == "forward" and dotted_name(n.func.value) == model))
            for n in walk_all(stmt))

    def _step_shape(self, step_if: cst.If, flag: str, model: str, master: str, scale: str, loop: cst.CSTNode):
        """(optimizer, grad helper, copy-back helper, NaN name, dropped log lines) of the fp16 step, or a reason."""
        other = one_stmt(step_if.orelse.body) if isinstance(step_if.orelse, cst.Else) else None
        step = other.value if isinstance(other, cst.Expr) else None
        if not (isinstance(step, cst.Call) and not step.args and isinstance(step.func, cst.Attribute)
                and step.func.attr.value == "step" and dotted_name(step.func.value)):
            return f"the `else:` of `if {flag}:` is not a plain optimizer.step()"
        opt = dotted_name(step.func.value)
        body = list(step_if.body.body) if isinstance(step_if.body, cst.IndentedBlock) else []
        i = 0
        if i < len(body):  # the gradient division, bare or under `if [F and] S != 1:`
            s = body[i]
            loop_node = s
            if isinstance(s, cst.If) and s.orelse is None and (self._scale_not_one(s.test, scale)
                                                             or self._flag_test(s.test, flag, scale)) \
                    and isinstance(s.body, cst.IndentedBlock) and len(s.body.body) == 1:
                loop_node = s.body.body[0]
            if isinstance(loop_node, cst.For) and grad_division(loop_node, scale) \
                    and params_call(loop_node.iter, model):
                i += 1
        shape = f"the fp16 step is not `{master}` grads copy with a NaN test, halving, step, copy back"
        if i >= len(body):
            return shape
        small = body[i].body[0] if isinstance(body[i], cst.SimpleStatementLine) and len(body[i].body) == 1 else None
        if not (isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name)
                and self._helper_call(small.value, (master, f"{model}.named_parameters()"))):
            return shape
        nan_name = small.targets[0].target.value
        h1 = small.value.func.value
        i += 1
        if i >= len(body) or not (isinstance(body[i], cst.If) and body[i].orelse is None
                                  and norm_code(body[i].test) == nan_name):
            return shape
        nan_if = body[i]
        dropped = self._nan_branch(nan_if, model, opt, scale, loop)
        if isinstance(dropped, str):
            return dropped
        i += 1
        if i + 2 != len(body):
            return shape
        c = sole_call(body[i])
        if not (c is not None and not c.args and norm_code(c.func) == f"{opt}.step"):
            return shape
        c = sole_call(body[i + 1])
        if not (c is not None and self._helper_call(c, (f"{model}.named_parameters()", master))):
            return shape
        return opt, h1, c.func.value, nan_name, dropped

    @staticmethod
    def _helper_call(c: cst.BaseExpression, first_two: Tuple[str, str]) -> bool:
        if not (isinstance(c, cst.Call) and isinstance(c.func, cst.Name)) or any(a.star for a in c.args):
            return False
        pos = [a for a in c.args if a.keyword is None]
        if len(pos) != 2 or [norm_code(a.value) for a in pos] != list(first_two):
            return False
        return all(a.keyword.value == "test_nan" for a in c.args if a.keyword is not None)

    def _nan_branch(self, nan_if: cst.If, model: str, opt: str, scale: str, loop: cst.CSTNode):
        """The log lines the NaN branch drops, or a reason: [log], S halved, [zero_grad], continue."""
        body = list(nan_if.body.body) if isinstance(nan_if.body, cst.IndentedBlock) else []
        smalls = [x for s in body if isinstance(s, cst.SimpleStatementLine) for x in s.body]
        if len(smalls) != sum(len(s.body) if isinstance(s, cst.SimpleStatementLine) else 10 for s in body):
            return "the NaN branch holds compound statements"
        if not smalls or not isinstance(smalls[-1], cst.Continue):
            return "the NaN branch does not end with `continue`"
        inner = [a for a in self._ancestors(nan_if) if isinstance(a, (cst.For, cst.While))]
        if not inner or inner[0] is not loop:
            return "the NaN branch's `continue` is not the training loop's"
        halved = 0
        logs: List[str] = []
        for x in smalls[:-1]:
            if halves(x, scale):
                halved += 1
            elif isinstance(x, cst.Expr) and isinstance(x.value, cst.Call) and norm_code(x.value.func) in (
                    f"{model}.zero_grad", f"{opt}.zero_grad"):
                continue
            elif isinstance(x, cst.Expr) and isinstance(x.value, cst.Call) and (dotted_name(x.value.func) or "").split(
                    ".")[0] in LOG_ROOTS:
                logs.append(code_of(x).strip())
            else:
                return f"the NaN branch does more than log, halve {scale}, zero the gradients and continue"
        if halved != 1:
            return f"the NaN branch does not halve {scale} once"
        return logs

    def _after_step(self, step_if: cst.CSTNode, loop: cst.CSTNode) -> List[str]:
        """The statements (first lines) that follow `step_if` up to the end of `loop`'s body."""
        out: List[str] = []
        node = step_if
        while node is not loop:
            block = self._block(node)
            if block is not None:
                for s in block[block.index(node) + 1:]:
                    out.append(code_of(s).strip().splitlines()[0].rstrip(":"))
            node = self.parents.get(node)
            while node is not None and node is not loop and self._block(node) is None:
                node = self.parents.get(node)
            if node is None:
                break
        return out

    def _plan(self, cast_if, copy_if, other, block, start, end, scale_if, back_line, loss, step_if, opt, loops,
              func, flag, scale, helper_defs, dropped) -> None:
        m = self.mig
        plan = m.plan
        use_scaler = m.ctx.options.use_scaler
        m.needs_torch = True
        sc = m.scaler_base
        plan.remove(cast_if)
        kept = list(copy_if.orelse.body.body)
        kept[0] = kept[0].with_changes(leading_lines=[*copy_if.leading_lines, *kept[0].leading_lines])
        plan.replace_stmt[copy_if] = kept
        dtype = "float16" if use_scaler else "bfloat16"
        plan.wrap(block[start], block[end], flag_autocast_maker(m.device, dtype, flag, self.module.default_indent))
        plan.remove(scale_if)
        if use_scaler:
            plan.replace_stmt[back_line] = [back_line.with_changes(body=[cst.Expr(templates.expression(
                f"{sc}.scale({loss}).backward()"))])]
            new = templates.statements(f"{sc}.step({opt})\n{sc}.update()\n")
        else:
            new = templates.statements(f"{opt}.step()\n")
        new[0] = new[0].with_changes(leading_lines=step_if.leading_lines)
        plan.replace_stmt[step_if] = new
        anchor = loops[-1]
        while self._block(anchor) is None:
            anchor = self.parents.get(anchor)
        if use_scaler:
            plan.insert_before(anchor, templates.statements(
                f"{sc} = {m.gs}(\"{m.device}\", init_scale={scale}, growth_interval={STATIC_INTERVAL}, "
                f"backoff_factor=0.5, enabled={flag})\n"))
        for d in helper_defs:
            plan.remove(d)
        self.handled.update(id(n) for n in walk_all(scale_if))
        self.handled.update(id(n) for n in walk_all(back_line))
        after = self._after_step(step_if, loops[0])
        later = [code_of(s).strip() for s in block[block.index(back_line) + 1:]
                 if isinstance(s, cst.SimpleStatementLine) and loss in names_read(s)]
        m.report(back_line.body[0].value, "A2A506",
                 f"hand-written fp16 training -> fp32 model + torch.autocast(enabled={flag})"
                 + (f" + {m.gs}(init_scale={scale}, growth_interval={STATIC_INTERVAL}, backoff_factor=0.5, "
                    f"enabled={flag})" if use_scaler else " in bfloat16 without a scaler")
                 + f". Numerics with {flag}: the optimizer now updates the model's fp32 weights (before: fp16 weights "
                 "copied from fp32 master copies after each step), and autocast runs fp16 per op; evaluation and "
                 "checkpoints after training see the fp32 model"
                 + (f"; {loss} read after the backward ({'; '.join(later)}) is no longer multiplied by {scale}"
                    if later else ""), fixed=True)
        m.report(step_if, "A2A506",
                 f"the step under {flag} -> scaler.step({opt}) + scaler.update(): a step whose gradients hold inf "
                 f"or NaN is skipped and the scale halved (the removed check tested NaN only), the scale never grows "
                 f"(as before); unlike the removed `continue`, a skipped step still runs what follows"
                 + (f" ({', '.join(after)})" if after else "")
                 + (f"; the log line on a skipped step is gone ({'; '.join(dropped)})" if dropped else ""), fixed=True)
