"""apex helpers with a torch twin, `clip_grad_norm_` (A2A320) and `to_python_float(x)` -> `x.item()`
(A2A321), and apex modules with none (xentropy, focal_loss, fmha, mlp, transformer, ...: A2A322,
naming the nearest option)."""
from __future__ import annotations

import libcst as cst

from .apex_modules_state import ModulesRun
from .base import FIX, WARNING, rule
from .code_layout import as_primary
from .fused_optimizers import CONTRIB_OPTIMIZER_HINT

rule("A2A320", "apex-clip-grad", "apex clip_grad_norm_ -> torch.nn.utils.clip_grad_norm_", fixes=True, severity=FIX,
     why="""
apex.contrib.clip_grad.clip_grad_norm_ has torch's signature (its docstring calls it identical,
with a fused kernel), and apex.fp16_utils.clip_grad_norm is the old torch alias.""",
     before="""
from apex.contrib.clip_grad import clip_grad_norm_


def clip(model):
    clip_grad_norm_(model.parameters(), 1.0)""",
     after="""
import torch


def clip(model):
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)""")
rule("A2A321", "to-python-float", "apex.fp16_utils.to_python_float(x) -> x.item()", fixes=True, severity=FIX,
     why="to_python_float(t) returned t.item() for tensors (t[0] for pre-0.4 tensors).",
     before="""
from apex.fp16_utils import to_python_float


def log(losses, reduced_loss, n):
    losses.update(to_python_float(reduced_loss), n)""",
     after="""
def log(losses, reduced_loss, n):
    losses.update(reduced_loss.item(), n)""")
rule("A2A322", "apex-module-no-twin", "apex module with no native torch twin", fixes=False, severity=WARNING,
     why="""
apex.contrib modules (xentropy, focal_loss, group_norm, groupbn, bottleneck, multihead_attn, fmha,
transducer, sparsity, ...), apex.mlp, apex.fused_dense, apex.transformer and apex.RNN have no exact
torch equivalent, and several were removed from apex itself. The message names the nearest option.""",
     before="crit = SoftmaxCrossEntropyLoss.apply",
     after="loss = torch.nn.functional.cross_entropy(logits, target, label_smoothing=0.1, ignore_index=pad)")

NO_TWIN_MODULES = [
    ("apex.contrib.xentropy", "torch.nn.functional.cross_entropy(logits, target, label_smoothing=..., ignore_index=...)"),
    ("apex.contrib.focal_loss", "torchvision.ops.sigmoid_focal_loss"),
    ("apex.contrib.group_norm", "torch.nn.GroupNorm (channels_last input works, without the NHWC kernel)"),
    ("apex.contrib.groupbn", "torch.nn.BatchNorm2d / torch.nn.SyncBatchNorm"),
    ("apex.contrib.cudnn_gbn", "torch.nn.SyncBatchNorm with a process group"),
    ("apex.contrib.bottleneck", "torchvision's Bottleneck (torch.compile can fuse it)"),
    ("apex.contrib.conv_bias_relu", "torch.nn.Conv2d followed by torch.nn.functional.relu (torch.compile fuses them)"),
    ("apex.contrib.multihead_attn", "torch.nn.MultiheadAttention or torch.nn.functional.scaled_dot_product_attention"),
    ("apex.contrib.fmha", "torch.nn.functional.scaled_dot_product_attention"),
    ("apex.contrib.transducer", "torchaudio.functional.rnnt_loss"),
    ("apex.contrib.sparsity", "torch.ao.pruning (no 2:4 ASP workflow in core torch)"),
    ("apex.contrib.index_mul_2d", "plain indexing and multiplication (x[idx] * y)"),
    ("apex.contrib.optimizers", CONTRIB_OPTIMIZER_HINT),
    ("apex.contrib", "no torch equivalent; keep apex for it or replace it by hand"),
    ("apex.mlp", "torch.nn.Sequential of torch.nn.Linear and activation layers"),
    ("apex.fused_dense", "torch.nn.Linear (FusedDenseGeluDense: Linear, GELU, Linear)"),
    ("apex.transformer", "Megatron-Core or torch.distributed.tensor (apex.transformer was removed from apex)"),
    ("apex.RNN", "torch.nn.LSTM / torch.nn.GRU"),
]


CLIP_FUNCS = {"apex.contrib.clip_grad.clip_grad_norm_", "apex.fp16_utils.clip_grad_norm"}


class HelperRewrites(ModulesRun):
    """clip_grad_norm_ and to_python_float rewritten; modules without a twin reported."""

    def _clip_grad(self, node: cst.Call, short: str) -> None:
        if self._ok(node, "A2A320"):
            self.plan.replace_node[node.func] = self._callee("torch.nn.utils.clip_grad_norm_",
                                                             "torch.nn.utils.clip_grad_norm_")
            self.ctx.report(node, "A2A320", f"{short} -> torch.nn.utils.clip_grad_norm_", fixed=True)

    def _to_python_float(self, node: cst.Call) -> None:
        if len(node.args) == 1 and node.args[0].keyword is None and not node.args[0].star \
                and self._ok(node, "A2A321"):
            arg = node.args[0].value
            self.plan.replace_node[node] = cst.Call(func=cst.Attribute(value=as_primary(arg), attr=cst.Name("item")))
            self.ctx.report(node, "A2A321", "to_python_float(x) -> x.item()", fixed=True)

    def _no_twin_module(self, node: cst.Call, q: str) -> None:
        for prefix, hint in NO_TWIN_MODULES:
            if q == prefix or q.startswith(prefix + "."):
                code = "A2A305" if prefix == "apex.contrib.optimizers" else "A2A322"
                if self._ok(node, code):
                    self.ctx.report(node, code, f"{q} has no native torch twin; nearest: {hint}")
                break
