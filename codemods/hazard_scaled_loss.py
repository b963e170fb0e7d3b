"""The scaled loss and its gradients: NaN / inf checks on a scaled loss (A2A605), and gradients
clipped after `scaler.scale(loss).backward()` but before `scaler.unscale_()` (A2A606)."""
from __future__ import annotations

from typing import List, Tuple

import libcst as cst

from .base import WARNING, rule
from .hazard_state import HazardState
from .names import dotted_name

CLIP_FUNCS = {"clip_grad_norm_", "clip_grad_value_", "clip_grad_norm"}

rule("A2A605", "nonfinite-check-scaled", "isnan / isinf check on a scaled loss", fixes=False, severity=WARNING,
     why="""
The scaled loss (scaler.scale(loss), apex's scaled_loss) overflows by design on some steps; GradScaler
skips those steps itself. Checking it for NaN/inf (and skipping or aborting) fires on harmless
overflow steps. Check the unscaled loss instead.""",
     before="""
import torch


def step(model, optimizer, scaler, x):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x).mean()
    if torch.isnan(scaler.scale(loss)):
        raise RuntimeError("nan")
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()""",
     after="if torch.isnan(loss): raise RuntimeError('nan')")
rule("A2A606", "clip-before-unscale", "gradient clipping between scaler.scale().backward() and scaler.step() without unscale_",
     fixes=False, severity=WARNING,
     why="""
Until scaler.unscale_(optimizer) the gradients are multiplied by the loss scale (65536 at start), so
clip_grad_norm_(..., max_norm) clips far too hard (the effective max norm shrinks by the scale) and a
grad-norm log is scaled. Call scaler.unscale_(optimizer) once right before the clip.""",
     before="""
import torch
from torch.nn.utils import clip_grad_norm_


def step(model, optimizer, scaler, x):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x).mean()
    scaler.scale(loss).backward()
    clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()""",
     after="scaler.scale(loss).backward()\nscaler.unscale_(optimizer)\nclip_grad_norm_(model.parameters(), 1.0)\n"
           "scaler.step(optimizer)")


class ScaledLossChecks(HazardState):
    """A2A605 and A2A606: which names hold a scaled loss, and each function's backward / unscale_ /
    clip / step events in source order."""

    def _track_scaled(self, node: cst.Assign) -> None:
        """`x = scaler.scale(loss)` (or a copy of a scaled name): `x` holds a scaled loss."""
        if self._is_scaled(node.value):
            for t in node.targets:
                n = dotted_name(t.target)
                if n:
                    self.scaled_names[-1].add(n)

    def _is_scaled(self, node: cst.BaseExpression) -> bool:
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "scale":
            owner = dotted_name(node.func.value) or ""
            return "scaler" in owner.lower()
        n = dotted_name(node)
        return n is not None and n in self.scaled_names[-1]

    def _nonfinite(self, node: cst.Call, last: str) -> None:
        if last in ("isnan", "isinf", "isfinite") and node.args and self._is_scaled(node.args[0].value):
            self._report(node, "A2A605", f"{last}() on a scaled loss: it overflows on purpose and GradScaler "
                         "skips those steps; check the unscaled loss instead")
        if isinstance(node.func, cst.Attribute) and last in ("isnan", "isinf", "isfinite") and not node.args \
                and self._is_scaled(node.func.value):
            self._report(node, "A2A605", f".{last}() on a scaled loss: check the unscaled loss instead")

    def _clip_events(self, node: cst.Call, last: str) -> None:
        """The event stream for clip-before-unscale."""
        events = self.functions[-1]
        if isinstance(node.func, cst.Attribute):
            owner = dotted_name(node.func.value) or ""
            if last == "backward" and isinstance(node.func.value, cst.Call) and self._is_scaled(node.func.value):
                events.append((self._line(node), "backward", node))
            elif last == "backward" and owner and self._is_scaled(node.func.value):
                events.append((self._line(node), "backward", node))
            elif last == "backward" and owner and not node.args:
                # `loss.backward()` of an unscaled loss (the fp32 branch of `if fp16: ... else: ...`)
                events.append((self._line(node), "plain_backward", node))
            elif last == "unscale_" and "scaler" in owner.lower():
                events.append((self._line(node), "unscale", node))
            elif last == "step" and "scaler" in owner.lower():
                events.append((self._line(node), "step", node))
        if last in CLIP_FUNCS and not any(isinstance(a.value, cst.BinaryOperation) and "get_scale()" in
                                          cst.Module([]).code_for_node(a.value) for a in node.args):
            # a clip whose threshold is scaled (`max_norm * scaler.get_scale()`, A2A148) clips scaled grads on purpose
            events.append((self._line(node), "clip", node))

    # L3 ------------------------------------------------------------------------------------
    def _check_clip_order(self, events: List[Tuple[int, str, cst.CSTNode]]) -> None:
        events.sort(key=lambda e: e[0])
        state = "idle"
        pending: List[cst.CSTNode] = []
        before_unscale: List[cst.CSTNode] = []  # clips before any backward here: scaled if an unscale_ follows
        for _, kind, node in events:
            if kind == "backward":
                state = "scaled"
                before_unscale = []
            elif kind == "plain_backward":
                state = "plain"
                before_unscale = []
            elif kind == "unscale":
                for clip in before_unscale:
                    # the backward ran elsewhere (a `training_step` method): the unscale_ after the clip says
                    # the gradients were still scaled when it read them
                    self._report(clip, "A2A606", "gradients are clipped before `scaler.unscale_` (the backward "
                                 "runs elsewhere, so they are still scaled here): call scaler.unscale_(optimizer) "
                                 "before clipping")
                before_unscale = []
                state = "unscaled"
            elif kind == "clip" and state == "idle":
                before_unscale.append(node)
            elif kind == "clip" and state == "scaled":
                pending.append(node)
            elif kind == "step":
                for clip in pending:
                    self._report(clip, "A2A606", "gradients are clipped while still scaled: call "
                                 "scaler.unscale_(optimizer) before clipping")
                pending = []
                state = "idle"
