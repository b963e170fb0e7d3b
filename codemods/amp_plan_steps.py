"""Optimizer steps of the amp optimizers -> `scaler.step(opt)`, with one `scaler.update()` after them."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import libcst as cst

from . import backward_helpers
from .amp_plan_steps_plain import plain_branch
from . import amp_rules as R
from .base import facts_key
from .names import assigned_names, norm_code
from .amp_plan_state import AmpPlanState, code_of, parse_expr, parse_stmt


class StepPlanning(AmpPlanState):
    """The optimizer-step planning step of the amp analysis (codemods/amp.py)."""

    def plan_steps(self) -> None:
        if not self.optimizers:
            return
        steps: List[Tuple[cst.Call, cst.BaseStatement, Optional[cst.FunctionDef], str]] = []
        optimizers = self.optimizers

        outer = self

        anchors = self._step_anchors  # step call -> the loop over the optimizers it sits in

        def visit_Call(n: cst.Call) -> None:
            f = n.func
            if not (isinstance(f, cst.Attribute) and f.attr.value == "step"):
                return
            if norm_code(f.value) in optimizers:
                steps.append((n, outer.stmt_of(n), outer.func_of(n), code_of(f.value)))
                return
            loop = outer._optimizer_loop(n, f.value)
            if loop is not None:
                steps.append((n, outer.stmt_of(n), outer.func_of(n), code_of(f.value)))
                anchors[id(n)] = loop

        self._replay(calls=visit_Call)
        steps = [s for s in steps if not self.in_dropped(s[0]) and not self._before_initialize(s[1], s[2])
                 and not self._before_any_backward(s[1], s[2]) and plain_branch(self, s[0]) is None]
        self._steps = steps
        if not steps and self.has_scale_loss and self._helper_funcs():
            self._publish_helpers()
            return
        if not steps and self.has_scale_loss and self.ctx.module_name and self.ctx.facts.extra.get(
                backward_helpers.HELD + facts_key(self.ctx.path, self.ctx.module_name)):
            node = next(s.call for s in self.sites if s.kind == "scale_loss")
            self.ctx.report(node, R.BACKWARD_HELPER.code, "a backward helper for other modules, held back: no file of "
                            "this run calls it, or one that does keeps its amp code (see its findings); the helper "
                            "and its callers migrate together", severity="warning")
        if not steps:
            if self.has_scale_loss:
                node = next(s.call for s in self.sites if s.kind == "scale_loss")
                self.report(node, R.STEP_MISSING, "the amp optimizer's `step()` is not in this module: call "
                                                  "`scaler.step(optimizer)` and `scaler.update()` there")
                self._unsafe = "the optimizer would step on scaled gradients"
            return
        if not self.use_scaler:
            return
        by_block: Dict[Tuple[int, int], List[Tuple[cst.Call, cst.BaseStatement, Optional[cst.FunctionDef], str]]] = {}
        for s in steps:
            call, stmt, func, opt = s
            small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
            if not (isinstance(small, cst.Expr) and small.value is call) or call.args:
                self.report(call, R.UNSUPPORTED, f"`{opt}.step(...)` used in an expression or with arguments: use "
                                                 f"`scaler.step({opt})` and `scaler.update()` by hand")
                continue
            sc = self.scaler_of_opt(opt)
            if sc is None:
                self.report(call, R.PER_LOSS_UNSUPPORTED, f"`{opt}.step()`: no `amp.scale_loss` of this module "
                                                          "names this optimizer, so which loss scaler steps it is "
                                                          "unknown")
                self._unsafe = "an optimizer step without a loss scaler"
                continue
            self.plan.replace_node[call] = parse_expr(f"{sc}.step({opt})")
            self.user_funcs.add(func)
            anchor = anchors.get(id(call), stmt)  # a loop over the optimizers updates once, after the loop
            loop = self._loop_of(anchor)
            by_block.setdefault((id(func), id(loop), sc), []).append((call, anchor, func, opt))
            self.report(call, R.STEP, f"`{opt}.step()` -> `{sc}.step({opt})`", fixed=True)
        for (_, _, sc), group in by_block.items():
            blocks = {id(self.block_of(s[1])[0]) for s in group}
            stepped = [norm_code(parse_expr(s[3])) for s in group]
            # one update after the iteration's last step; an optimizer that steps again in the same
            # block (iterations written out one after another) needs an update before its next step
            if len(blocks) == 1 and len(stepped) == len(set(stepped)):
                last = max(group, key=lambda s: self.block_of(s[1])[1])
                self.plan.insert_after(last[1], [parse_stmt(f"{sc}.update()")])
            elif self.loss_scalers is not None and len(set(stepped)) > 1:
                # apex updated a loss's scaler once per scale_loss: its optimizers stepping apart cannot say when
                self.report(group[0][0], R.PER_LOSS_UNSUPPORTED, f"the optimizers of one loss ({', '.join(sorted(set(s[3] for s in group)))}) "
                                                                 "step in different places: when its scaler "
                                                                 "must update is not clear")
                self._unsafe = "the optimizers of one loss step apart"
            else:
                for s in group:
                    self.plan.insert_after(s[1], [parse_stmt(f"{sc}.update()")])

    def _optimizer_loop(self, call: cst.Call, receiver: cst.BaseExpression) -> Optional[cst.For]:
        """The `for o in optimizers:` around `o.step()` when `optimizers` holds the amp optimizers
        (`amp.scale_loss(loss, optimizers)`, or the list `amp.initialize` was given), `o` is that loop's
        own plain target and the loop body does not rebind it."""
        if not isinstance(receiver, cst.Name):
            return None
        for node in self.index.ancestors(call):
            if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                return None
            if isinstance(node, cst.For) and isinstance(node.target, cst.Name) and \
                    node.target.value == receiver.value:
                rebound = receiver.value in assigned_names(node.body)
                return node if norm_code(node.iter) in self.optimizers and not rebound else None
        return None

    def _before_any_backward(self, stmt: cst.CSTNode, func: Optional[cst.FunctionDef]) -> bool:
        """Whether no scaled backward of `func` can run before `stmt`: every one comes later in the
        function and none shares a loop with it. Such a step (UNITER's "quick hack for amp
        delay_unscale bug", a dummy `optimizer.step()` before the training loop) steps no scaled
        gradient, and `scaler.step` would fail there (no `scaler.scale` yet this iteration)."""
        pos = self.ctx._positions
        if pos is None or stmt not in pos:
            return False
        mine = [w for w, f, _ in self._backwards if f is func]
        if not mine or any(w not in pos for w in mine):
            return False
        line = pos[stmt].start.line
        if any(pos[w].start.line < line for w in mine):
            return False
        loops = [a for a in self.index.ancestors(stmt) if isinstance(a, (cst.For, cst.While))]
        return not any(self.index.contains(loop, w) for loop in loops for w in mine)

    def _before_initialize(self, stmt: cst.CSTNode, func: Optional[cst.FunctionDef]) -> bool:
        """Whether `stmt` comes before the scaler's creation in the function that calls `amp.initialize`:
        a plain fp32 step (a reference run, say) that runs, at least the first time, with no scaler."""
        anchor = getattr(self, "scaler_anchor", None)
        if anchor is None or func is not self.init_func or self.scaler_global or self.scaler_is_attr:
            return False
        pos = self.ctx._positions
        if pos is None or stmt not in pos or anchor not in pos:
            return False
        return pos[stmt].start.line < pos[anchor].start.line

    def _loop_of(self, stmt: cst.CSTNode) -> Optional[cst.CSTNode]:
        cur = self.parent(stmt)
        while cur is not None and not isinstance(cur, (cst.FunctionDef, cst.Module)):
            if isinstance(cur, (cst.For, cst.While)):
                return cur
            cur = self.parent(cur)
        return None

    def _next_step(self, stmt: cst.CSTNode, func: Optional[cst.FunctionDef], opt: Optional[str]):
        pos = self.ctx._positions
        line = pos[stmt].start.line if pos is not None and stmt in pos else 0
        best = None
        for s in self._steps:
            if s[2] is not func or (opt is not None and norm_code(parse_expr(s[3])) != norm_code(parse_expr(opt))):
                continue
            sl = pos[s[1]].start.line if pos is not None and s[1] in pos else 0
            if sl > line and (best is None or sl < best[0]):
                best = (sl, s)
        return best[1] if best else None
