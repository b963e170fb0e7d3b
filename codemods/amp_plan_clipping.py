"""Gradient clipping and `amp.master_params` reads: `scaler.unscale_(opt)` before them, on the path the step takes."""
from __future__ import annotations

from typing import List, Optional, Set, Tuple

import libcst as cst

from . import accum_clip, amp_plan_clip_gate, clip_in_place, clip_loops, clip_reach, unsafe_fixes
from . import amp_rules as R
from .early_exits import may_exit_early
from .amp_plan_steps_plain import plain_branch
from .names import arg_by, assigned_names, dotted_name, norm_code
from .amp_plan_state import AmpPlanState, code_of, optimizer_params, parse_expr, parse_stmt


CLIP_FUNCS = ("clip_grad_norm_", "clip_grad_value_", "clip_grad_norm",
              "clip_grads", "clip_gradients")  # mmcv's OptimizerHook, Lightning's LightningModule


class ClipPlanning(AmpPlanState):
    """The clipping planning step of the amp analysis (codemods/amp.py)."""

    def plan_clipping(self) -> None:
        funcs = {id(s.func) for s in self.sites if s.kind == "scale_loss"} | {id(s[2]) for s in self._steps}
        clips: List[cst.Call] = []
        outer = self

        def visit_Call(n: cst.Call) -> None:
            d = dotted_name(n.func) or ""
            reads_master = any(isinstance(a.value, cst.Call) and outer.is_amp(a.value.func, "master_params")
                               for a in n.args)
            if (d.split(".")[-1] in CLIP_FUNCS or reads_master) and id(outer.func_of(n)) in funcs and \
                    plain_branch(outer, n) is None:  # a clip after the fp32 branch's own backward
                clips.append(n)

        self._replay(calls=visit_Call)
        if self.use_scaler:
            for clip in clip_reach.unseen_clips(self, CLIP_FUNCS, funcs):
                if self.ctx.enabled(R.UNSCALE.code) and not self.ctx.suppressed(clip, R.UNSCALE.code):
                    self.report(clip, R.CLIP_ELSEWHERE, "gradients are still scaled here (this function clips but "
                                                        "steps no optimizer): call `scaler.unscale_(optimizer)` "
                                                        "before clipping")
                    self._unsafe = "a gradient clip outside the functions holding the backward and the step"
        unscaled: Set[Tuple[int, str]] = set()
        collapsed: List[cst.CSTNode] = []
        for clip in clips:
            if self.in_dropped(clip) or any(self.index.contains(c, clip) for c in collapsed):
                continue
            if not self.ctx.enabled(R.UNSCALE.code) or self.ctx.suppressed(clip, R.UNSCALE.code):
                continue
            params = arg_by(clip, 0, "parameters")
            for a in clip.args:
                if isinstance(a.value, cst.Call) and self.is_amp(a.value.func, "master_params"):
                    params = a
            mp_opt: Optional[str] = None
            if params is not None and isinstance(params.value, cst.Call) and self.is_amp(params.value.func, "master_params"):
                self._mp_done.add(id(params.value))
                o = arg_by(params.value, 0, "optimizer")
                mp_opt = code_of(o.value) if o is not None else None
            stmt = self.stmt_of(clip)
            func = self.func_of(clip)
            step = self._next_step(stmt, func, mp_opt)
            per_opt = step is None and mp_opt is not None and clip_loops.indexed(self, clip, params.value) is not None
            if per_opt:
                # `for name in names: clip(amp.master_params(opts[name]))`: the step is `o.step()` in a loop
                # over `[opts[k] for k in names]`, which must be shown to step the same optimizers
                step = clip_loops.paired_step(self, clip, params.value, func)
                if step is None:
                    self.report(clip, R.CLIP_ELSEWHERE, f"gradients are still scaled here: `{mp_opt}` is one "
                                "optimizer of a loop over their names, and no loop over the same optimizers "
                                "that steps them follows in this function: `scaler.unscale_` each optimizer "
                                "once before its clip and `scaler.step` it after, by hand")
                    self._unsafe = "a per-optimizer clip loop whose optimizer steps are not found"
                    continue
            opt = mp_opt or (step[3] if step else None)
            if opt is None:
                self.report(clip, R.CLIP_ELSEWHERE, "gradients are still scaled here: call `scaler.unscale_(optimizer)` "
                                                    "before clipping")
                self._unsafe = "a gradient read whose optimizer step is not found"
                continue
            # collapse `if fp16: clip(amp.master_params(o)) else: clip(model.parameters())`
            target_stmt: cst.CSTNode = stmt
            replacement: Optional[cst.BaseStatement] = None
            p = self.parent(stmt)
            owner = self.parent(p) if isinstance(p, cst.IndentedBlock) else None
            if mp_opt is not None and isinstance(owner, cst.If) and owner.body is p and len(p.body) == 1 and \
                    isinstance(owner.orelse, cst.Else) and isinstance(owner.orelse.body, cst.IndentedBlock) and \
                    len(owner.orelse.body.body) == 1:
                other_stmt = owner.orelse.body.body[0]
                if _differs_only_in(stmt, other_stmt, params.value):  # type: ignore[union-attr]
                    target_stmt, replacement = owner, other_stmt  # type: ignore[assignment]
                    collapsed.append(owner)
            # a step in a loop over the optimizers: the window is that loop's block, and a clip in a loop
            # over the same optimizers (`for o in optimizers: clip(amp.master_params(o))`) unscales there
            loop = self._step_anchors.get(id(step[0])) if step is not None else None
            if loop is not None and self.index.contains(loop, target_stmt):
                loop = None  # the clip sits in the step's own loop: the window is that loop's body
            anchor = loop if loop is not None else (step[1] if step is not None else None)
            window = self._window_child(target_stmt, anchor) if anchor is not None else None
            in_loop = loop is not None and opt is not None and window is not None and \
                (per_opt or self._optimizer_loop(clip, parse_expr(opt)) is not None)
            if loop is not None and not in_loop and not (per_opt and window is None):
                self.report(clip, R.CLIP_ELSEWHERE, f"gradients are still scaled here, and `{opt}` steps in a loop "
                                                    "over several optimizers: unscale each of them "
                                                    "(`scaler.unscale_(o)`) before this clip, by hand")
                self._unsafe = "a gradient clip before a loop of optimizer steps would clip scaled gradients"
                continue
            if step is not None and window is None and self._clip_to_boundary(clip, stmt, target_stmt, replacement,
                                                                      params, mp_opt, opt, step, func, unscaled,
                                                                      collapsed):
                continue
            finite = None
            if step is not None and window is None and not per_opt and self.use_scaler:
                gate = self._step_gate_after(target_stmt, step[1])
                finite = amp_plan_clip_gate.finite_gate(self, stmt, target_stmt, step[1], func) \
                    if gate is not None else None
                if finite is not None:
                    # the skipping branch updates too: one `scaler.update()` on every path from the unscale_
                    sc = self.scaler_of_opt(opt) or self.scaler_expr()
                    self.plan.insert_before(finite.orelse.body.body[0], [parse_stmt(f"{sc}.update()")])
                    self.report(clip, R.UNSCALE, f"the step runs under `if {gate}:`: `{sc}.update()` on the "
                                "branch that skips it as well, where it lowers the scale after an overflow as apex did "
                                "(apex also skipped the next step it reached after such a skip; GradScaler does not)", fixed=True)
            if finite is None and (step is not None and window is None or
                                   step is not None and window is not None and
                                   self._exits_before_step(window, target_stmt, anchor)):
                gate = self._step_gate_after(target_stmt, step[1]) if window is None else None
                if not per_opt and loop is None and self._clip_in_place(clip, stmt, target_stmt, replacement, params,
                                                                        mp_opt, opt, step, func, unscaled, gate):
                    continue
                if gate is not None:
                    self.report(clip, R.CLIP_ELSEWHERE, f"`{step[3] if per_opt else opt}.step()` runs only under "
                                f"`if {gate}:` after this "
                                "clip: `scaler.unscale_` before the clip, `scaler.step` and `scaler.update()` must "
                                "run on the same path (GradScaler already skips non-finite steps: a finite-norm test "
                                "can go; an accumulation boundary must hold the clip too)")
                elif window is not None:
                    self.report(clip, R.CLIP_ELSEWHERE, f"a path from this clip can leave before "
                                f"`{step[3] if per_opt else opt}.step()` (a `return`, `continue` or `break` between "
                                "them, such as a `continue` on the micro-batches that do not step): `scaler.unscale_` "
                                "before the clip must be followed by `scaler.step` and `scaler.update()` on every "
                                f"path; move the clip next to the step, after `scaler.unscale_({opt})`, by hand")
                else:
                    self.report(clip, R.CLIP_ELSEWHERE, f"clip runs on every micro-batch but `{opt}.step()` only at "
                                f"the boundary: move it next to the step after `scaler.unscale_({opt})`")
                self._unsafe = "a gradient clip the step does not follow on every path would clip scaled gradients"
                continue
            if replacement is not None:
                self.plan.replace_stmt[target_stmt] = [replacement]
            elif mp_opt is not None:
                gen = optimizer_params(mp_opt, sole_arg=len(clip.args) == 1)
                self.plan.replace_node[params.value] = gen  # type: ignore[union-attr]
            # a read of the parameters after the last step of the function (`torch.save(list(
            # amp.master_params(opt)))` at the end of training) reads no scaled gradient
            reads_grads = step is not None or (dotted_name(clip.func) or "").split(".")[-1] in CLIP_FUNCS
            key = (id(func), norm_code(parse_expr(opt)), id(step[1]) if step is not None else 0)
            inserted = False
            if self.use_scaler and reads_grads and key not in unscaled:
                unscaled.add(key)
                unscale = [parse_stmt(f"{self.scaler_of_opt(opt) or self.scaler_expr()}.unscale_({opt})")]
                bw = self._backward_before(target_stmt, func, opt)
                if in_loop:
                    self.plan.insert_before(target_stmt, unscale)
                elif bw is not None and step is not None and window is not None and \
                        self._window_child(bw, step[1]) is not None and \
                        self._index_in(self._window_child(bw, step[1])) <= self._index_in(window) and \
                        not self._exits_between(self._window_child(bw, step[1]), bw, window):
                    # apex unscaled when scale_loss exited: do the same, right after the backward
                    self.plan.insert_after(bw, unscale)
                else:
                    self.plan.insert_before(window if window is not None else target_stmt, unscale)
                self.user_funcs.add(func)
                inserted = True
            if not inserted and mp_opt is None:
                continue
            if inserted:
                self.report(clip, R.UNSCALE, f"`scaler.unscale_({opt})` before reading gradients" + (
                    "; `amp.master_params` -> the optimizer's parameters" if mp_opt else ""), fixed=True)
            else:
                self.report(clip, R.UNSCALE, "`amp.master_params` -> the optimizer's parameters", fixed=True)

    def _clip_to_boundary(self, clip, stmt, target_stmt, replacement, params, mp_opt, opt, step, func,
                          unscaled, collapsed) -> bool:
        """A clip on every micro-batch, the step at the accumulation boundary: offer the unsafe fix that moves
        the clip after `scaler.unscale_(opt)` before the step (codemods/accum_clip.py). True: handled."""
        code = R.CLIP_AT_BOUNDARY.code
        if not self.use_scaler or not self.ctx.enabled(code) or self.ctx.suppressed(clip, code):
            return False
        moved = replacement if replacement is not None else stmt
        orig_target = target_stmt
        removed = [target_stmt]
        pair = accum_clip.branch_pair(stmt, self.parent) if mp_opt is not None and replacement is None else None
        sums = accum_clip.summed_pair(stmt, func, self.parent) \
            if mp_opt is not None and replacement is None and pair is None and func is not None else None
        message = accum_clip.change_message(opt, True)
        tail: List[cst.CSTNode] = []
        if sums is not None and _differs_only_in(clip, sums[2], params.value):
            # the fp32 clip's norm summed into accumulators read nowhere: they move with it
            target_stmt, removed, tail = sums[0], [stmt] + list(sums[1]), list(sums[1])
            moved = cst.SimpleStatementLine(body=[cst.Expr(sums[2])])
            message = accum_clip.sums_message(opt, sums[3])
        elif pair is not None and _differs_only_in(pair[1], pair[2], params.value):
            # `if fp16: <backward>; clip(amp.master_params(o)) else: <backward>; clip(model.parameters())`,
            # each clip alone or under the same guard (`if max_norm > 0:`): both go, the plain one runs at
            # the boundary
            target_stmt, moved, removed = pair[0], pair[2], [pair[1], pair[2]]
        elif replacement is None:
            # the clip with its guard (`if max_norm > 0: clip(...)`): the guard moves with it
            unit = accum_clip.guard_unit(stmt, self.parent)
            moved = unit
            if mp_opt is not None:
                moved = unit.deep_replace(params.value, optimizer_params(mp_opt, sole_arg=len(clip.args) == 1))
            target_stmt, removed = unit, [unit]
        if accum_clip.boundary_of(target_stmt, moved, step[1], self.parent, self.block_of) is None:
            return False
        if not tail:
            message = accum_clip.change_message(opt, len(removed) > 1)
        if not unsafe_fixes.enabled(self.ctx) and self._clip_in_place(
                clip, stmt, orig_target, replacement, params, mp_opt, opt, step, func, unscaled, None):
            return True  # the exact fix (A2A148) is the default: the unsafe move only with --unsafe-fixes
        if not unsafe_fixes.offer(self.ctx, clip, code, message):
            self._unsafe = "a gradient clip on every micro-batch (unsafe fix available: --unsafe-fixes)"
            collapsed.extend(removed)  # the other branch's clip is part of this fix: no finding of its own
            return True
        unscaled.add((id(func), norm_code(parse_expr(opt)), id(step[1])))
        collapsed.extend(removed)
        sc = self.scaler_of_opt(opt) or self.scaler_expr()
        for r in removed:
            self.plan.remove(r)
        self.plan.insert_before(step[1], [parse_stmt(f"{sc}.unscale_({opt})")] + [
            s.with_changes(leading_lines=[]) for s in (tail or [moved])])  # type: ignore[union-attr]
        self.user_funcs.add(func)
        return True

    def _clip_in_place(self, clip, stmt, target_stmt, replacement, params, mp_opt, opt, step, func, unscaled,
                       gate: Optional[str]) -> bool:
        """A clip on every micro-batch before a step it does not always reach: keep it in place, its threshold
        times the scale (codemods/clip_in_place.py), when it is a torch clip and the one scaler of `opt` is
        in scope. True: done."""
        code = R.CLIP_SCALED.code
        if not self.use_scaler or self.loss_scalers is not None or step is None or \
                not self.ctx.enabled(code) or self.ctx.suppressed(clip, code):
            return False
        if (id(func), norm_code(parse_expr(opt)), id(step[1])) in unscaled:
            return False  # an unscale_ already comes first
        if gate is not None and clip_in_place.used_norm(self, clip) and \
                any(n.split(".")[0] in norm_code(parse_expr(gate)) for n in assigned_names(stmt)):
            return False  # the step is gated on the clip's norm (`if isfinite(norm)`): not this shape
        sc = self.scaler_of_opt(opt) or self.scaler_expr()
        if replacement is not None:
            # `if fp16: clip(amp.master_params(o), n) else: clip(model.parameters(), n)`: the plain one, scaled
            call = next((n for n in _calls(replacement) if norm_code(n.func) == norm_code(clip.func)), None)
            new = clip_in_place.rewritten(self, call, None, None, sc) if call is not None else None
            if new is None:
                return False
            self.plan.replace_stmt[target_stmt] = [replacement.deep_replace(call, new)]
        else:
            new = clip_in_place.rewritten(self, clip, params, mp_opt, sc)
            if new is None:
                return False
            self.plan.replace_node[clip] = new
        self.user_funcs.add(func)
        self.report(clip, R.CLIP_SCALED, clip_in_place.message(opt, sc, clip_in_place.used_norm(self, clip)),
                    fixed=True)
        return True

    def _index_in(self, stmt: cst.CSTNode) -> int:
        return self.block_of(stmt)[1]

    def _step_gate_after(self, clip_stmt: cst.CSTNode, step_stmt: cst.CSTNode) -> Optional[str]:
        """The test of the `if` that holds the step and follows the clip (or a statement holding the
        clip) in one block; None if there is none."""
        here: Optional[cst.CSTNode] = clip_stmt
        while here is not None and not isinstance(here, (cst.FunctionDef, cst.Module)):
            block, idx = self.block_of(here)
            cur: Optional[cst.CSTNode] = step_stmt
            while block is not None and cur is not None:
                if isinstance(cur, cst.If):
                    b, i = self.block_of(cur)
                    if b is block and i > idx:
                        return code_of(cur.test)
                cur = self.parent(cur)
            here = self.parent(here)
        return None

    def _exits_before_step(self, window: cst.CSTNode, clip_stmt: cst.CSTNode, step_stmt: cst.CSTNode) -> bool:
        """Whether a path from the clip can leave the step's block before the step (`continue` on
        micro-batches that do not step): the clip then runs where no step and no update follow."""
        block, start = self.block_of(window)
        end = self._index_in(step_stmt)
        if block is None:
            return True
        between = list(block.body[start + 1:end])
        if window is not clip_stmt:
            between.append(window)
        return may_exit_early(between)

    def _exits_between(self, bw_child: cst.CSTNode, bw: cst.CSTNode, window: cst.CSTNode) -> bool:
        """Whether a path from the backward can leave the step's block before `window` (the clip)."""
        block, start = self.block_of(bw_child)
        end = self._index_in(window)
        if block is None:
            return True
        between = list(block.body[start + 1:end])
        if bw_child is not bw:
            between.append(bw_child)  # the exit may sit beside the backward inside this statement
        return may_exit_early(between)

    def _window_child(self, node: cst.CSTNode, step_stmt: cst.CSTNode) -> Optional[cst.CSTNode]:
        """The statement of the step's block that holds `node`, when it comes before the step."""
        block, idx = self.block_of(step_stmt)
        cur: Optional[cst.CSTNode] = node
        while cur is not None:
            if isinstance(cur, cst.BaseStatement):
                b, i = self.block_of(cur)
                if b is block:
                    return cur if i < idx else None
            cur = self.parent(cur)
        return None

    def _backward_before(self, stmt: cst.CSTNode, func: Optional[cst.FunctionDef], opt: str) -> Optional[cst.CSTNode]:
        """The migrated backward (scale_loss statement) of `opt` nearest before `stmt` in `func`."""
        pos = self.ctx._positions
        line = pos[stmt].start.line if pos is not None and stmt in pos else 0
        best = None
        for anchor, f, opts in self._backwards:
            if f is not func or (opts and norm_code(parse_expr(opt)) not in opts):
                continue
            al = pos[anchor].start.line if pos is not None and anchor in pos else 0
            if al < line and (best is None or al > best[0]):
                best = (al, anchor)
        return best[1] if best else None


def _differs_only_in(stmt: cst.CSTNode, other: cst.CSTNode, node: cst.CSTNode) -> bool:
    """Whether `other` is `stmt` with `node` replaced by some other expression (e.g. master params vs
    `model.parameters()`), compared without whitespace."""
    a, b, n = norm_code(stmt), norm_code(other), norm_code(node)
    i = a.find(n)
    if i < 0:
        return False
    prefix, suffix = a[:i], a[i + len(n):]
    return b.startswith(prefix) and b.endswith(suffix) and len(b) > len(prefix) + len(suffix) - 1 \
        and "amp." not in b


def _calls(node: cst.CSTNode) -> List[cst.Call]:
    from .walk import iter_nodes
    return [n for n in iter_nodes(node) if isinstance(n, cst.Call)]
