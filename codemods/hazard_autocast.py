"""Code autocast regions break: BCELoss / binary_cross_entropy, which raise under CUDA autocast
(A2A603), and `.half()` / float16 casts left beside autocast and GradScaler (A2A604)."""
from __future__ import annotations

import libcst as cst

from .base import WARNING, rule
from .hazard_state import HazardState
from .index import ModuleIndex
from .names import dotted_name

rule("A2A603", "bce-under-autocast", "BCELoss / binary_cross_entropy in an autocast file", fixes=False,
     severity=WARNING,
     why="""
torch.nn.BCELoss and F.binary_cross_entropy raise inside a CUDA autocast region ("unsafe to autocast")
and apex O1 banned them. Feed logits to BCEWithLogitsLoss / binary_cross_entropy_with_logits (drop the
sigmoid), or compute the loss outside autocast on .float() inputs.""",
     before="""
import torch
from torch import nn


def step(model, x, y):
    criterion = nn.BCELoss()
    with torch.autocast("cuda", dtype=torch.float16):
        logits = model(x)
        loss = criterion(torch.sigmoid(logits), y)
    return loss""",
     after="criterion = nn.BCEWithLogitsLoss()\nloss = criterion(logits, y)")
rule("A2A604", "fp16-cast-left", ".half() / float16 cast left in mixed-precision code", fixes=False,
     severity=WARNING,
     why="""
With autocast + GradScaler the model and its inputs stay fp32: autocast picks fp16 per op, and
GradScaler raises "Attempting to unscale FP16 gradients" for fp16 parameters. `.half()` and
`.to(torch.float16)` casts left from apex O2/O3 or hand-written fp16 code should go (inference-only
code may keep them deliberately: add `# apex2amp: ignore[A2A604]`). Casts that are plainly on purpose
are not reported: a round trip (`model.half().float()`) and one side of a precision switch
(`model.half() if fp16 else model.float()`).""",
     before="""
import torch


def train(model, loader):
    scaler = torch.amp.GradScaler("cuda")
    model = model.cuda().half()
    for images, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(images.half()).mean()
        scaler.scale(loss).backward()""",
     after="model = model.cuda()")

HALF_TYPES = {"torch.float16", "torch.half", "torch.HalfTensor", "torch.cuda.HalfTensor"}


class AutocastChecks(HazardState):
    """A2A603 and A2A604 on the calls the lint visits."""

    def _bce(self, node: cst.Call, func: str, last: str) -> None:
        if self.autocast_file and (func.endswith("BCELoss") or last == "binary_cross_entropy") \
                and not self._in_autocast_off():
            self._report(node, "A2A603", f"{last} raises under CUDA autocast (unsafe to autocast): use "
                         "BCEWithLogitsLoss / binary_cross_entropy_with_logits on logits, or compute it outside "
                         "autocast on .float() inputs")

    def _fp16_cast(self, node: cst.Call, last: str) -> None:
        if self.autocast_file:
            self._half_cast(node, last)

    def _in_autocast_off(self) -> bool:
        return bool(self.autocast_depth) and self.autocast_depth[-1] is False and any(
            d is not None for d in self.autocast_depth)

    def _deliberate_precision(self, node: cst.Call) -> bool:
        """A cast the code makes on purpose, not for training: a round trip (`model.half().float()`,
        which rounds weights to fp16 precision) or one branch of a precision switch
        (`model.half() if fp16 else model.float()`, inference code choosing its dtype)."""
        parents = ModuleIndex.of(self.wrapper.module).parents
        parent = parents.get(id(node))
        if isinstance(parent, cst.Attribute) and parent.value is node and parent.attr.value == "float" \
                and isinstance(parents.get(id(parent)), cst.Call):
            return True
        if isinstance(parent, cst.IfExp) and (parent.body is node or parent.orelse is node):
            other = parent.orelse if parent.body is node else parent.body
            return isinstance(other, cst.Call) and isinstance(other.func, cst.Attribute) \
                and other.func.attr.value == "float"
        return False

    def _half_cast(self, node: cst.Call, last: str) -> None:
        if not isinstance(node.func, cst.Attribute) or self._deliberate_precision(node):
            return
        if last == "half" and not node.args:
            self._report(node, "A2A604", ".half() left in mixed-precision code: keep the model and inputs fp32 "
                         "(autocast casts per op; GradScaler rejects fp16 gradients)")
        elif last in ("to", "type") and node.args:
            for a in node.args:
                if a.keyword is not None and a.keyword.value not in ("dtype",):
                    continue
                d = dotted_name(a.value) or ""
                s = a.value.evaluated_value if isinstance(a.value, cst.SimpleString) else ""
                if d in HALF_TYPES or (isinstance(s, str) and "HalfTensor" in s):
                    self._report(node, "A2A604", f".{last}({d or s}) left in mixed-precision code: keep tensors "
                                 "fp32 and let autocast choose fp16 per op")
