"""Findings of hand-written fp16 training that is not migrated (A2A507-A2A509): each site (the model cast
and other `.half()` casts, the fp32 master copies with their copy helpers and loops, the loss
multiplication, the gradient division, the halving on NaN) with what replaces it.

`HandFp16Findings` is a mixin of manual_fp16.HandFp16 (mig, module, calls, handled).
"""
from __future__ import annotations

from typing import List, Set, Tuple

import libcst as cst

from .fp16_shapes import grad_division, halves, is_scale, params_call, scaled_operand, to_fp32
from .names import code_of, dotted_name
from .scaling_shapes import STATIC_INTERVAL, walk_all


class HandFp16Findings:
    """The report-only methods of manual_fp16.HandFp16."""

    def _report_sites(self, casts, reason: str) -> None:
        m = self.mig
        gs, dev = m.gs, m.device
        for c, model, _line in casts:
            self.handled.add(id(c))
            m.report(c, "A2A507", f"{model}.half(): hand-written fp16 training not migrated ({reason}). Keep "
                     f"{model} fp32 and run forward + loss under torch.autocast(\"{dev}\", dtype=torch.float16, "
                     "enabled=<the fp16 flag>); the optimizer then updates the fp32 weights themselves (numerics "
                     "change: the weights are no longer rounded to fp16 after each step)")
        cast_ids = {id(c) for c, _m, _l in casts}
        for c in self.calls:
            if isinstance(c.func, cst.Attribute) and c.func.attr.value == "half" and not c.args \
                    and id(c) not in cast_ids:
                self.handled.add(id(c))
                m.report(c, "A2A507", f"{code_of(c)}: cast to fp16 by hand for the fp16 model; once the model "
                         "stays fp32 under autocast, pass fp32 tensors (autocast casts per op)")
        masters = self._master_copies()
        for node, name, model in masters:
            m.report(node, "A2A508", f"{name}: fp32 master copies of {model}'s parameters kept by hand; with "
                     f"{model} fp32 under autocast, build the optimizer on {model}'s own parameters and remove "
                     "the copies")
        names = {name for _n, name, _m in masters}
        in_loop_heads = {id(n) for f in walk_all(self.module) if isinstance(f, cst.For) for n in walk_all(f.iter)}
        for c in self.calls:
            if id(c) in in_loop_heads:
                continue  # `for a, b in zip(copies, model.parameters())`: the loop is reported
            args = [a.value for a in c.args]
            if any(dotted_name(a) in names for a in args) and any(params_call(a) for a in args):
                callee = code_of(c.func)
                m.report(c, "A2A508", f"{callee}(...) copies between the fp32 master copies and the fp16 model: "
                         "remove it with the copies (GradScaler unscales the model's own gradients, and "
                         "scaler.step skips a step whose gradients hold inf or NaN)")
        for node in walk_all(self.module):
            if isinstance(node, cst.For):
                heads = walk_all(node.iter)
                if any(dotted_name(n) in names for n in heads) and any(params_call(n) for n in heads):
                    m.report(node, "A2A508", "this loop copies between the fp32 master copies and the fp16 model: "
                             "remove it with the copies")
                s = grad_division(node)
                if s:
                    m.report(node, "A2A509", f"gradients divided by {s} by hand: GradScaler unscales them "
                             f"(scaler.unscale_(optimizer) where gradients are read before the step, else "
                             "scaler.step(optimizer) does it)")
            elif isinstance(node, cst.If):
                body = node.body.body if isinstance(node.body, cst.IndentedBlock) else []
                for st in body:
                    if not isinstance(st, cst.SimpleStatementLine):
                        continue
                    s = next((h for h in (halves(x) for x in st.body) if h), None)
                    if s:
                        m.report(node, "A2A509", f"loss scale {s} halved by hand on a bad gradient: "
                                 f"{m.gs}(\"{dev}\", init_scale={s}, growth_interval={STATIC_INTERVAL}, "
                                 "backoff_factor=0.5) does it, and also skips on inf (a NaN-only test lets inf "
                                 "through); the statements after scaler.step still run on a skipped step")
                        break
        for site, loss, scale in self._loss_products():
            self.handled.add(id(site))
            owner = (dotted_name(scale) or "").rpartition(".")[0]
            dynamic = getattr(m, "dynamic", {}).get(owner)
            if dynamic:  # a hand-written dynamic scaler's scale (codemods/dynamic_scaler.py, A2A146)
                m.report(site, "A2A509", f"{code_of(loss)} multiplied by {code_of(scale)} by hand: scaler = "
                         f"{dynamic[:-1]}, enabled=<the fp16 flag>) and scaler.scale(loss).backward()")
                continue
            m.report(site, "A2A509", f"{code_of(loss)} multiplied by {code_of(scale)} by hand: "
                     f"scaler = {gs}(\"{dev}\", init_scale={code_of(scale)}, growth_interval={STATIC_INTERVAL}, "
                     "backoff_factor=0.5, enabled=<the fp16 flag>) and scaler.scale(loss).backward()")

    def _master_copies(self) -> List[Tuple[cst.CSTNode, str, str]]:
        """(statement, name, model) of `P = [...M.(named_)parameters()...clone/detach/data...float()...]`."""
        out = []
        for node in walk_all(self.module):
            if not (isinstance(node, cst.Assign) and len(node.targets) == 1):
                continue
            name = dotted_name(node.targets[0].target)
            if name is None:
                continue
            inner = walk_all(node.value)
            models = {m for m in (params_call(n) for n in inner) if m}
            attrs = {n.func.attr.value for n in inner if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute)}
            if models and any(to_fp32(n) for n in inner) and attrs & {"clone", "detach", "new", "copy_"}:
                out.append((node, name, sorted(models)[0]))
        return out

    def _loss_products(self) -> List[Tuple[cst.CSTNode, cst.BaseExpression, cst.BaseExpression]]:
        """(site, loss, scale) of `(L * S).backward()`, `L = L * S` / `X = L * S` with `X.backward()`, `L *= S`."""
        receivers: Set[str] = set()
        out = []
        for c in self.calls:
            if isinstance(c.func, cst.Attribute) and c.func.attr.value == "backward":
                r = c.func.value
                if isinstance(r, cst.Name):
                    receivers.add(r.value)
                else:
                    parts = scaled_operand(r)
                    if parts:
                        out.append((c, *parts))
        for node in walk_all(self.module):
            if isinstance(node, cst.Assign) and len(node.targets) == 1 \
                    and dotted_name(node.targets[0].target) in receivers:
                parts = scaled_operand(node.value)
                if parts:
                    out.append((node.value, *parts))
            elif isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.MultiplyAssign) \
                    and dotted_name(node.target) in receivers and is_scale(node.value):
                out.append((node, node.target, node.value))
        return out

    # -- the migration -------------------------------------------------------------------------
