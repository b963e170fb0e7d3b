"""apex.optimizers, apex.normalization, apex.contrib and apex.fp16_utils helpers -> torch equivalents.

Fused optimizers become `torch.optim` classes with their arguments normalised by the *apex*
signature (positional orders differ), fused norms become `torch.nn` modules or functionals with the
eps apex used, `to_python_float(x)` becomes `x.item()`, and apex modules with no native twin get a
finding naming the nearest option. Names are resolved through imports (star imports included).
FP16_Optimizer and the fp16_utils model casts belong to `manual_scaling` (one pattern, one codemod).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Set, Tuple

import libcst as cst

from . import templates
from .base import FIX, WARNING, Codemod, FileContext, rule
from .edits import EditPlan, apply_plan, as_primary, realign_call
from .index import ModuleIndex
from .optimizer_resume import report_resume_sites
from .walk import Visitor, iter_nodes
from .names import ImportTable, assigned_names, code_of, dotted_name

# -- rules ---------------------------------------------------------------------------------------

rule("A2A301", "fused-adam", "apex FusedAdam -> torch.optim.AdamW / Adam (fused)", fixes=True, severity=FIX,
     why="""
apex.optimizers.FusedAdam is AdamW (decoupled weight decay) unless adam_w_mode=False, with
weight_decay 0.0 by default. torch.optim.AdamW defaults to weight_decay 0.01, so the rewrite always
spells weight_decay out. Positional arguments are bound by apex's signature (lr, bias_correction,
betas, eps, adam_w_mode, weight_decay, ...) and written as keywords. fused=True needs torch >= 2.0 for
AdamW and >= 1.13 for Adam (else foreach=True). set_grad_none is dropped (zero_grad() sets grads to
None by default since torch 2.0). Results are close to apex's but not bitwise identical.""",
     before="""
import torch
from apex.optimizers import FusedAdam


def make(model):
    return FusedAdam(model.parameters(), 1e-3, True, (0.9, 0.98))""",
     after="""
import torch


def make(model):
    return torch.optim.AdamW(model.parameters(), 1e-3, betas=(0.9, 0.98), weight_decay=0.0, fused=True)""")
rule("A2A302", "fused-sgd", "apex FusedSGD -> torch.optim.SGD (fused)", fixes=True, severity=FIX,
     why="""
apex.optimizers.FusedSGD has torch.optim.SGD's leading arguments (lr, momentum, dampening,
weight_decay, nesterov). materialize_master_grads and set_grad_none are dropped. fused=True needs
torch >= 2.3 (else foreach=True). wd_after_momentum=True has no torch equivalent and is reported.""",
     before="""
from apex.optimizers import FusedSGD


def make(model):
    return FusedSGD(model.parameters(), lr=0.1, momentum=0.9)""",
     after="""
import torch


def make(model):
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, fused=True)""")
rule("A2A303", "fused-adagrad", "apex FusedAdagrad -> torch.optim.Adagrad", fixes=True, severity=FIX,
     why="""
apex FusedAdagrad(params, lr, eps, weight_decay) binds its positional arguments differently from
torch.optim.Adagrad(params, lr, lr_decay, weight_decay, initial_accumulator_value, eps), so they are
written as keywords. adagrad_w_mode=True (decoupled weight decay) has no torch equivalent and is reported.""",
     before="""
from apex.optimizers import FusedAdagrad


def make(params):
    return FusedAdagrad(params, 0.01, 1e-10, 1e-4)""",
     after="""
import torch


def make(params):
    return torch.optim.Adagrad(params, 0.01, eps=1e-10, weight_decay=1e-4, foreach=True)""")
rule("A2A304", "apex-optimizer-manual", "apex fused optimizer call that cannot be rewritten safely",
     fixes=False, severity=WARNING,
     why="""
The call uses an argument whose torch equivalent differs (bias_correction=False, master_weights,
wd_after_momentum, adagrad_w_mode, a non-literal adam_w_mode, *args/**kwargs), so rewriting it
could change training. Pick the torch optimizer by hand (the message names it).""",
     before="""
from apex.optimizers import FusedAdam


def make(params, args):
    return FusedAdam(params, lr=1e-3, adam_w_mode=args.adamw)""",
     after="optimizer = (torch.optim.AdamW if args.adamw else torch.optim.Adam)(params, lr=1e-3, weight_decay=0.0)")
rule("A2A305", "apex-optimizer-no-twin", "apex optimizer with no torch equivalent (LAMB, NovoGrad, distributed)",
     fixes=False, severity=WARNING,
     why="""
FusedLAMB, FusedNovoGrad, FusedMixedPrecisionLamb and the apex.contrib distributed optimizers have no
drop-in torch replacement. Keep apex for them, vendor an implementation, or switch optimizer (the
message names the nearest option). FusedLAMB also clips the global grad norm itself (max_grad_norm).""",
     before="""
from apex.optimizers import FusedLAMB


def make(params):
    return FusedLAMB(params, lr=1e-3)""",
     after="# e.g. torch.optim.AdamW(params, lr=..., weight_decay=0.01) + clip_grad_norm_ (not LAMB)")
rule("A2A310", "fused-layer-norm", "apex FusedLayerNorm / MixedFusedLayerNorm / FastLayerNorm -> torch.nn.LayerNorm",
     fixes=True, severity=FIX,
     why="""
torch.nn.LayerNorm has the same parameters (weight, bias), so state dicts load unchanged.
memory_efficient is dropped. Under autocast apex returned the autocast dtype while torch's
layer_norm runs in fp32; MixedFusedLayerNorm returned the parameter dtype. Subclasses get the new base.
`isinstance(m, FusedLayerNorm)` / `issubclass` checks (BERT's `init_weights`) name torch.nn.LayerNorm
too, since the migrated code builds torch LayerNorms; a check stays (A2A118) while the module still
builds an apex norm that could not be migrated, or uses an apex norm class as a value
(`norm = FusedLayerNorm if fused else nn.LayerNorm`, `partial(FusedLayerNorm, ...)`). A rewritten
check also matches LayerNorms that were torch's before: for weight initialisation they get the
values torch gives them anyway.""",
     before="""
import torch
from apex.normalization import FusedLayerNorm


class Block(torch.nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.ln = FusedLayerNorm(hidden, eps=1e-12)""",
     after="""
import torch


class Block(torch.nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.ln = torch.nn.LayerNorm(hidden, eps=1e-12)""")
rule("A2A311", "fused-rms-norm", "apex FusedRMSNorm / MixedFusedRMSNorm -> torch.nn.RMSNorm (torch >= 2.4)",
     fixes=True, severity=FIX,
     why="""
torch.nn.RMSNorm exists from torch 2.4. Its eps defaults to None (finfo(dtype).eps), apex's to 1e-5,
so eps is always written out. Below --min-torch 2.4 the call is reported instead.""",
     before="""
from apex.normalization import FusedRMSNorm

norm = FusedRMSNorm(4096)""",
     after="""
import torch

norm = torch.nn.RMSNorm(4096, eps=1e-5)""")
rule("A2A312", "fused-norm-functional", "apex fused_layer_norm / fused_rms_norm functions -> torch.nn.functional",
     fixes=True, severity=FIX,
     why="""
The apex functional norms default to eps=1e-6 (the modules to 1e-5) and take (input, weight, bias,
shape) in a different order from F.layer_norm(input, shape, weight, bias, eps). The rewrite reorders
the arguments and always writes eps. F.rms_norm needs torch >= 2.4.""",
     before="""
from apex.normalization.fused_layer_norm import fused_layer_norm_affine


def f(x, w, b):
    return fused_layer_norm_affine(x, w, b, (1024,))""",
     after="""
import torch


def f(x, w, b):
    return torch.nn.functional.layer_norm(x, (1024,), w, b, eps=1e-6)""")
rule("A2A313", "apex-norm-manual", "apex norm that cannot be rewritten for the target torch", fixes=False,
     severity=WARNING,
     why="""
torch.nn.RMSNorm and F.rms_norm need torch >= 2.4, and some arguments (elementwise_affine=False on the
Mixed* norms, *args) have no exact equivalent. Raise --min-torch, or replace the norm by hand.""",
     before="norm = FusedRMSNorm(1024)  # with --min-torch 2.1",
     after="# torch.nn.RMSNorm(1024, eps=1e-5) needs torch >= 2.4; keep a local RMSNorm module")
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
rule("A2A323", "apex-subclass-manual", "class derived from an apex optimizer or norm that is not rewritten",
     fixes=False, severity=WARNING,
     why="""
A subclass of an apex fused optimizer (or of FusedRMSNorm) inherits apex's defaults; giving it the
torch base would silently change them (weight_decay, eps). Change the base by hand and pass the apex
defaults explicitly in super().__init__().""",
     before="""
from apex.optimizers import FusedAdam


class MyAdam(FusedAdam):
    pass""",
     after="class MyAdam(torch.optim.AdamW):  # pass weight_decay=0.0 explicitly")

# -- name resolution -----------------------------------------------------------------------------

# Names a star import of these apex modules provides (their __all__ / public names).
STAR_EXPORTS: Dict[str, Set[str]] = {
    "apex.fp16_utils": {"FP16_Optimizer", "FP16Model", "network_to_half", "BN_convert_float", "tofp16",
                        "convert_network", "convert_module", "prep_param_lists", "model_grads_to_master_grads",
                        "master_params_to_model_params", "to_python_float", "clip_grad_norm", "LossScaler",
                        "DynamicLossScaler"},
    "apex.optimizers": {"FusedAdam", "FusedSGD", "FusedAdagrad", "FusedLAMB", "FusedNovoGrad",
                        "FusedMixedPrecisionLamb"},
    "apex.normalization": {"FusedLayerNorm", "FusedRMSNorm", "MixedFusedLayerNorm", "MixedFusedRMSNorm"},
}

# Submodule spellings that re-export the same object.
ALIASES = {
    "apex.optimizers.fused_adam.FusedAdam": "apex.optimizers.FusedAdam",
    "apex.optimizers.fused_sgd.FusedSGD": "apex.optimizers.FusedSGD",
    "apex.optimizers.fused_adagrad.FusedAdagrad": "apex.optimizers.FusedAdagrad",
    "apex.optimizers.fused_lamb.FusedLAMB": "apex.optimizers.FusedLAMB",
    "apex.optimizers.fused_novograd.FusedNovoGrad": "apex.optimizers.FusedNovoGrad",
    "apex.optimizers.fused_mixed_precision_lamb.FusedMixedPrecisionLamb": "apex.optimizers.FusedMixedPrecisionLamb",
    "apex.contrib.layer_norm.layer_norm.FastLayerNorm": "apex.contrib.layer_norm.FastLayerNorm",
    "apex.contrib.clip_grad.clip_grad.clip_grad_norm_": "apex.contrib.clip_grad.clip_grad_norm_",
}
for _n in ("FusedLayerNorm", "FusedRMSNorm", "MixedFusedLayerNorm", "MixedFusedRMSNorm"):
    ALIASES[f"apex.normalization.fused_layer_norm.{_n}"] = f"apex.normalization.{_n}"
for _f in ("fused_layer_norm", "fused_layer_norm_affine", "fused_rms_norm", "fused_rms_norm_affine",
           "mixed_dtype_fused_layer_norm_affine", "mixed_dtype_fused_rms_norm_affine"):
    ALIASES[f"apex.normalization.{_f}"] = f"apex.normalization.fused_layer_norm.{_f}"
for _f in STAR_EXPORTS["apex.fp16_utils"]:
    for _sub in ("fp16util", "fp16_optimizer", "loss_scaler"):
        ALIASES[f"apex.fp16_utils.{_sub}.{_f}"] = f"apex.fp16_utils.{_f}"


def module_level_defs(module: cst.Module) -> Set[str]:
    """Names a module binds at top level by def, class or assignment (they shadow star imports)."""
    out: Set[str] = set()
    for stmt in module.body:
        if isinstance(stmt, cst.SimpleStatementLine) and any(
                isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body):
            continue
        if isinstance(stmt, (cst.SimpleStatementLine, cst.FunctionDef, cst.ClassDef)):
            out |= {n for n in assigned_names(stmt) if "." not in n}
    return out


class Resolver:
    """Qualified apex names of expressions: imports, `import apex as x` and star imports, aliases folded."""

    def __init__(self, module: cst.Module, module_name: str = ""):
        self.table = ImportTable.of(module, module_name)
        self.module = module
        self._defs: Optional[Set[str]] = None
        self.star: Dict[str, str] = {}
        for mod in self.table.star_modules:
            for name in STAR_EXPORTS.get(mod, ()):
                if name not in self.table.bindings and name not in self.defs:
                    self.star[name] = f"{mod}.{name}"
        # apex_name() is None for every expression unless some import (or star import) binds an apex name
        self.has_apex = bool(self.star) or any(q == "apex" or q.startswith("apex.")
                                               for qs in self.table.bindings.values() for q in qs)
        self._apex_names: Dict[int, Tuple[cst.BaseExpression, Optional[str]]] = {}

    @property
    def defs(self) -> Set[str]:
        """`module_level_defs` of the module, on first use (a walk of every top-level statement)."""
        if self._defs is None:
            self._defs = module_level_defs(self.module)
        return self._defs

    @classmethod
    def of(cls, module: cst.Module, module_name: str = "") -> "Resolver":
        """The resolver of `module` (cached with the module's shared index; it is read-only)."""
        tables = ModuleIndex.of(module).tables
        key = f"apex_modules.Resolver|{module_name}"
        res = tables.get(key)
        if res is None:
            res = tables[key] = cls(module, module_name)
        return res  # type: ignore[return-value]

    def names(self, node: cst.BaseExpression) -> Set[str]:
        name = dotted_name(node)
        if name is None:
            return set()
        out = set(self.table.qualify(name))
        head, _, rest = name.partition(".")
        if head in self.star:
            q = self.star[head]
            out.add(f"{q}.{rest}" if rest else q)
        return {ALIASES.get(q, q) for q in out}

    def apex_name(self, node: cst.BaseExpression) -> Optional[str]:
        """The apex dotted name `node` refers to, if any."""
        if not self.has_apex:
            return None
        hit = self._apex_names.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]
        out = None
        for q in sorted(self.names(node)):
            if q == "apex" or q.startswith("apex."):
                out = q
                break
        self._apex_names[id(node)] = (node, out)
        return out

    def other_binding(self, node: cst.BaseExpression) -> Optional[str]:
        """A binding of `node` that is neither apex's nor torch's (`SGD` bound to Transformer Engine's
        FusedSGD in one `try` branch and to apex's in another), if any."""
        for q in sorted(self.names(node)):
            if not (q == "apex" or q.startswith("apex.") or q == "torch" or q.startswith("torch.")):
                return q
        return None

    def spelling(self, qualified: str, fallback: str) -> str:
        """How this module spells `qualified` (e.g. `nn.LayerNorm` when `nn` is torch.nn), else `fallback`."""
        parts = qualified.split(".")
        for i in range(len(parts) - 1, 0, -1):
            prefix, rest = ".".join(parts[:i]), ".".join(parts[i:])
            for local, qs in self.table.bindings.items():
                if qs == {prefix} and local not in self.defs:
                    return f"{local}.{rest}"
        return fallback

    def has_torch(self) -> bool:
        return self.table.bindings.get("torch") == {"torch"}


def tree_order(index: ModuleIndex, nodes: Sequence[cst.CSTNode]) -> List[cst.CSTNode]:
    """`nodes` (distinct nodes of `index`'s module) sorted into the order a visitor meets them (pre-order)."""
    child_pos: Dict[int, int] = {}

    def path(node: cst.CSTNode) -> Tuple[int, ...]:
        steps: List[int] = []
        cur = node
        parent = index.parent(cur)
        while parent is not None:
            if id(cur) not in child_pos:
                for i, ch in enumerate(parent.children):
                    child_pos[id(ch)] = i
            steps.append(child_pos[id(cur)])
            cur, parent = parent, index.parent(parent)
        return tuple(reversed(steps))

    return sorted(nodes, key=path)


def ensure_import(module: cst.Module, stmt_code: str, bound: bool) -> cst.Module:
    """Add a top-level import (e.g. `import torch`) after the module's leading imports unless `bound`."""
    if bound:
        return module
    if stmt_code.startswith("import ") and " as " not in stmt_code:
        from .importing import place_sorted_import
        placed = place_sorted_import(module, stmt_code[len("import "):].strip())
        if placed is not None:  # an isort-sorted import block stays sorted
            return placed
    new_stmt = templates.statement(stmt_code)
    body = list(module.body)
    insert_at = 0
    for i, stmt in enumerate(body):
        if isinstance(stmt, cst.SimpleStatementLine) and all(
                isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body):
            insert_at = i + 1
        elif i == 0 and isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(
                stmt.body[0], cst.Expr) and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString)):
            insert_at = 1
        elif insert_at or not isinstance(stmt, cst.SimpleStatementLine):
            break
    if insert_at < len(body) and insert_at == 0:
        new_stmt = new_stmt.with_changes(leading_lines=body[0].leading_lines)
        body[0] = body[0].with_changes(leading_lines=[])
    body.insert(insert_at, new_stmt)
    return module.with_changes(body=body)


def ensure_torch(module: cst.Module, resolver: Resolver) -> cst.Module:
    """`import torch` where the rewritten code needs it and the module has none."""
    return ensure_import(module, "import torch", resolver.has_torch())


# -- argument handling ---------------------------------------------------------------------------


def bind_args(call: cst.Call, signature: Sequence[str]) -> Optional[Dict[str, cst.Arg]]:
    """Map parameter name -> Arg by the (apex) signature; None on *args/**kwargs or unknown keywords."""
    out: Dict[str, cst.Arg] = {}
    pos = 0
    for a in call.args:
        if a.star:
            return None
        if a.keyword is not None:
            if a.keyword.value not in signature or a.keyword.value in out:
                return None
            out[a.keyword.value] = a
        else:
            if pos >= len(signature):
                return None
            out[signature[pos]] = a
            pos += 1
    return out


def literal_bool(node: Optional[cst.BaseExpression]) -> Optional[bool]:
    if isinstance(node, cst.Name) and node.value in ("True", "False"):
        return node.value == "True"
    if isinstance(node, cst.Integer) and node.value in ("0", "1"):
        return node.value == "1"
    return None


def rebuild_args(call: cst.Call, apex_sig: Sequence[str], torch_sig: Sequence[str], drop: Set[str],
                 extra: Sequence[Tuple[str, str]]) -> List[cst.Arg]:
    """Keep arguments in their order; positionals whose torch position differs become keywords.

    `drop` names parameters to remove, `extra` (name, code) pairs are appended as keywords unless present.
    """
    args: List[cst.Arg] = []
    pos = 0
    positional_ok = True
    present: Set[str] = set()
    for a in call.args:
        if a.keyword is None:
            name = apex_sig[pos]
            pos += 1
            if name in drop:
                positional_ok = False
                continue
            present.add(name)
            if positional_ok and pos - 1 < len(torch_sig) and torch_sig[pos - 1] == name:
                args.append(a)
            else:
                positional_ok = False
                args.append(a.with_changes(keyword=cst.Name(name), equal=cst.AssignEqual(
                    whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))))
        else:
            name = a.keyword.value
            if name in drop:
                continue
            present.add(name)
            args.append(a)
    new = [(n, c) for n, c in extra if n not in present]
    return append_keywords(call, args, new)


def append_keywords(call: cst.Call, args: List[cst.Arg], new: Sequence[Tuple[str, str]]) -> List[cst.Arg]:
    """Append `name=code` arguments, keeping a multi-line call's layout and trailing comma."""
    if not new:
        if args and call.args and args[-1] is not call.args[-1]:
            args[-1] = args[-1].with_changes(comma=call.args[-1].comma)
        return args
    trailing = call.args[-1].comma if call.args else cst.MaybeSentinel.DEFAULT
    sep: object = cst.MaybeSentinel.DEFAULT
    if len(call.args) >= 2 and isinstance(call.args[-2].comma, cst.Comma):
        sep = call.args[-2].comma
    elif isinstance(trailing, cst.Comma) and isinstance(trailing.whitespace_after, cst.ParenthesizedWhitespace):
        sep = trailing
    made = [cst.Arg(value=templates.expression(code), keyword=cst.Name(name),
                    equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                          whitespace_after=cst.SimpleWhitespace("")))
            for name, code in new]
    if args:
        args[-1] = args[-1].with_changes(comma=sep)
    for m in made[:-1]:
        args.append(m.with_changes(comma=sep))
    args.append(made[-1].with_changes(comma=trailing if isinstance(trailing, cst.Comma) else cst.MaybeSentinel.DEFAULT))
    return args


# -- tables --------------------------------------------------------------------------------------

ADAM_SIG = ("params", "lr", "bias_correction", "betas", "eps", "adam_w_mode", "weight_decay", "amsgrad",
            "set_grad_none", "capturable", "master_weights")
TORCH_ADAM_SIG = ("params", "lr", "betas", "eps", "weight_decay", "amsgrad")
SGD_SIG = ("params", "lr", "momentum", "dampening", "weight_decay", "nesterov", "wd_after_momentum",
           "materialize_master_grads", "set_grad_none")
TORCH_SGD_SIG = ("params", "lr", "momentum", "dampening", "weight_decay", "nesterov")
ADAGRAD_SIG = ("params", "lr", "eps", "weight_decay", "set_grad_none", "adagrad_w_mode")
TORCH_ADAGRAD_SIG = ("params", "lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps")
LN_SIG = ("normalized_shape", "eps", "elementwise_affine", "memory_efficient")
MIXED_LN_SIG = ("normalized_shape", "eps", "memory_efficient", "elementwise_affine")
TORCH_LN_SIG = ("normalized_shape", "eps", "elementwise_affine")

NO_TWIN_OPTIMIZERS = {
    "apex.optimizers.FusedLAMB": "torch has no LAMB: keep apex's FusedLAMB, vendor a LAMB, or use "
                                 "torch.optim.AdamW plus torch.nn.utils.clip_grad_norm_ (FusedLAMB clips by max_grad_norm itself)",
    "apex.optimizers.FusedNovoGrad": "torch has no NovoGrad: keep apex, vendor one, or use torch.optim.AdamW",
    "apex.optimizers.FusedMixedPrecisionLamb": "torch has no LAMB: keep apex or vendor a LAMB; "
                                               "fp32 master weights are implicit with an fp32 model + autocast",
}
CONTRIB_OPTIMIZER_HINT = ("not a drop-in: use torch.distributed.optim.ZeroRedundancyOptimizer(params, "
                          "optimizer_class=torch.optim.AdamW, ...) or FSDP with a torch optimizer")

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

LAYER_NORMS = {"apex.normalization.FusedLayerNorm": LN_SIG, "apex.normalization.MixedFusedLayerNorm": MIXED_LN_SIG,
               "apex.contrib.layer_norm.FastLayerNorm": ("hidden_size", "eps")}
RMS_NORMS = {"apex.normalization.FusedRMSNorm": LN_SIG, "apex.normalization.MixedFusedRMSNorm": MIXED_LN_SIG}
FUNCTIONAL = {
    # apex name: (apex signature, torch functional, torch positional order)
    "apex.normalization.fused_layer_norm.fused_layer_norm_affine":
        (("input", "weight", "bias", "normalized_shape", "eps", "memory_efficient"), "layer_norm",
         ("input", "normalized_shape", "weight", "bias")),
    "apex.normalization.fused_layer_norm.fused_layer_norm":
        (("input", "normalized_shape", "eps", "memory_efficient"), "layer_norm", ("input", "normalized_shape")),
    "apex.normalization.fused_layer_norm.fused_rms_norm_affine":
        (("input", "weight", "normalized_shape", "eps", "memory_efficient"), "rms_norm",
         ("input", "normalized_shape", "weight")),
    "apex.normalization.fused_layer_norm.fused_rms_norm":
        (("input", "normalized_shape", "eps", "memory_efficient"), "rms_norm", ("input", "normalized_shape")),
}
CLIP_FUNCS = {"apex.contrib.clip_grad.clip_grad_norm_", "apex.fp16_utils.clip_grad_norm"}


class ApexModulesToTorch(Codemod):
    """apex.optimizers, apex.normalization, apex.contrib and apex.fp16_utils helpers -> torch equivalents."""

    NAME = "apex_modules"
    DESCRIPTION = "apex.optimizers, apex.normalization, apex.contrib and apex.fp16_utils helpers -> torch equivalents"
    CODES = ("A2A301", "A2A302", "A2A303", "A2A304", "A2A305", "A2A310", "A2A311", "A2A312", "A2A313",
             "A2A320", "A2A321", "A2A322", "A2A323", "A2A324")
    WORDS = (b"apex",)

    def transform(self, wrapper: cst.MetadataWrapper, ctx: FileContext) -> cst.Module:
        module = wrapper.module
        res = Resolver.of(module, ctx.module_name)
        if not res.has_apex:  # nothing resolves to apex: no call or base can need work
            return module
        run = _Run(res, ctx)
        index = ModuleIndex.of(module)
        # the visitor's work, fed in tree order with the calls and classes that name something in apex
        calls = [c for c in index.calls if res.apex_name(c.func) is not None]
        # apex.optimizers.FP16_Optimizer exists only in apex < 0.1, whose FusedAdam is another optimizer
        # (another positional order, eps before the bias correction): manual_scaling migrates it with its wrapper
        run.legacy_adam = any(res.apex_name(c.func) == "apex.optimizers.FP16_Optimizer" for c in calls)
        classes = [k for k in index.classes if any(res.apex_name(b.value) is not None for b in k.bases)]
        for node in tree_order(index, classes + calls) if classes and calls else classes or calls:
            if isinstance(node, cst.ClassDef):
                run.visit_ClassDef(node)
            else:
                run.visit_Call(node)
        checks = [c for c in index.calls if isinstance(c.func, cst.Name) and c.func.value in TYPE_CHECKS]
        # after every call and base is planned: a check may change only once no apex norm is left
        if checks and not _apex_norms_left(index, res, run.plan, checks):
            for node in checks:
                run.layer_norm_type_check(node, index)
        report_resume_sites(index, run.migrated_optimizers, ctx)
        if not run.plan:
            return module
        _realign_calls(index, run.plan)
        new = apply_plan(module, run.plan)
        if run.needs_torch:
            new = ensure_torch(new, res)
        return new


TYPE_CHECKS = ("isinstance", "issubclass")


def _realign_calls(index: ModuleIndex, plan: EditPlan) -> None:
    """Calls given a callee of another length keep their continuation lines aligned (see realign_call)."""
    for old, new in list(plan.replace_node.items()):
        if not (isinstance(old, cst.Call) and isinstance(new, cst.Call)):
            continue
        stmt = index.parent(old)
        while stmt is not None and not isinstance(stmt, cst.BaseSmallStatement):
            stmt = index.parent(stmt)
        line = index.parent(stmt) if stmt is not None else None
        if not isinstance(line, cst.SimpleStatementLine) or line.body[0] is not stmt:
            continue
        plan.replace_node[old] = realign_call(old, new, code_of(stmt).split("\n", 1)[0])


def _classinfo(check: cst.Call) -> Optional[cst.BaseExpression]:
    """The classes argument of a type check, when it is the second of two plain positional arguments."""
    if len(check.args) != 2 or any(a.keyword is not None or a.star for a in check.args):
        return None
    return check.args[1].value


def _apex_norms_left(index: ModuleIndex, res: "Resolver", plan: EditPlan, checks: Sequence[cst.Call]) -> bool:
    """Whether the migrated module may still hold apex layer norms, so that a type check must keep
    matching apex's class: a reference to one (any of them: MixedFusedLayerNorm derives from
    FusedLayerNorm) that is not a call or base `plan` rewrites, a type check's class, an import, a
    name being bound, or the value of a plain alias (`BertLayerNorm = FusedLayerNorm`, whose own uses
    are references too): `norm = FusedLayerNorm if fused else nn.LayerNorm`, `partial(FusedLayerNorm)`,
    a call held with a finding. Inside a class of the same name (the fallback `class BertLayerNorm` of
    an apex import guard), the name is that class."""
    allowed = {id(c.func) for c in index.calls if c in plan.replace_node}
    allowed.update(id(n) for n in plan.replace_node if isinstance(n, (cst.Name, cst.Attribute)))  # bases
    for check in checks:
        classinfo = _classinfo(check)
        if classinfo is not None:
            allowed.add(id(classinfo))
            if isinstance(classinfo, cst.Tuple):
                allowed.update(id(e.value) for e in classinfo.elements)
    for node in list(index.names) + list(index.attributes):
        if id(node) in allowed or res.apex_name(node) not in LAYER_NORMS:
            continue
        parent = index.parent(node)
        if isinstance(parent, cst.Attribute) and parent.attr is node:
            continue  # the last part of a dotted name: the dotted name itself is looked at
        if isinstance(parent, (cst.ClassDef, cst.FunctionDef, cst.AsName)) and parent.name is node or \
                isinstance(parent, cst.AssignTarget) or \
                isinstance(parent, cst.Assign) and parent.value is node and \
                all(isinstance(t.target, cst.Name) for t in parent.targets):
            continue
        spelled = code_of(node)
        if any(isinstance(a, (cst.Import, cst.ImportFrom)) or isinstance(a, cst.ClassDef) and a.name.value == spelled
               for a in index.ancestors(node)):
            continue  # an import, or `super(BertLayerNorm, self)` in the fallback class of that name
        return True
    return False


def _same_type_check(other: cst.BaseExpression, check: cst.Call, classinfo: cst.BaseExpression) -> bool:
    """Whether `other` is `check` (a type check) with `classinfo` as its classes: `check` once rewritten."""
    return isinstance(other, cst.Call) and code_of(other.func) == code_of(check.func) and len(other.args) == 2 \
        and code_of(other.args[0].value) == code_of(check.args[0].value) \
        and code_of(other.args[1].value) == code_of(classinfo)


def _classes_tuple(classinfo: cst.Tuple, new_of: Dict[int, cst.BaseExpression]) -> cst.BaseExpression:
    """`classinfo` with the classes `new_of` names replaced, a class now written twice kept once, and a
    tuple left with one class unwrapped to it: `(nn.LayerNorm, FusedLayerNorm)` -> `nn.LayerNorm`.
    A tuple holding a comment only has its classes replaced (dropping one could drop the comment)."""
    kept: List[cst.BaseElement] = []
    seen: Set[str] = set()
    shorten = "#" not in code_of(classinfo)
    written = {code_of(v) for v in new_of.values()} if shorten else set()
    for element in classinfo.elements:
        new = new_of.get(id(element.value)) if isinstance(element, cst.Element) else None
        value = new if new is not None else element.value
        spelled = code_of(value) if isinstance(element, cst.Element) else None
        if spelled in seen and spelled in written:
            continue
        if spelled is not None:
            seen.add(spelled)
        kept.append(element.with_changes(value=value))
    if shorten and len(kept) == 1 and isinstance(kept[0], cst.Element):
        return kept[0].value
    if len(kept) < len(classinfo.elements):
        kept[-1] = kept[-1].with_changes(comma=classinfo.elements[-1].comma)
    return classinfo.with_changes(elements=kept)


class _Run(Visitor):
    """Walks calls and class bases once, planning rewrites and reporting findings."""

    def __init__(self, res: Resolver, ctx: FileContext):
        self.res = res
        self.ctx = ctx
        self.plan = EditPlan()
        self.needs_torch = False
        self.min_torch = ctx.options.min_torch
        self.migrated_optimizers: List[Tuple[cst.Call, str, str]] = []  # (apex call, apex class, torch class)
        self.legacy_adam = False  # the module uses apex < 0.1 (apex.optimizers.FP16_Optimizer)

    # helpers
    def _ok(self, node: cst.CSTNode, code: str) -> bool:
        return self.ctx.enabled(code) and not self.ctx.suppressed(node, code)

    def _callee(self, qualified: str, fallback: str) -> cst.BaseExpression:
        spelled = self.res.spelling(qualified, fallback)
        if spelled.split(".")[0] == "torch":
            self.needs_torch = True
        return templates.expression(spelled)

    # visitors
    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        for base in node.bases:
            q = self.res.apex_name(base.value)
            if q is None:
                continue
            if q in LAYER_NORMS and self._ok(base, "A2A310"):
                self.plan.replace_node[base.value] = self._callee("torch.nn.LayerNorm", "torch.nn.LayerNorm")
                self.ctx.report(base, "A2A310", f"base class {q.rsplit('.', 1)[1]} -> torch.nn.LayerNorm; check that "
                                "super().__init__() passes no apex-only arguments (memory_efficient)", fixed=True)
            elif (q.startswith("apex.optimizers.") or q in RMS_NORMS) and self._ok(base, "A2A323"):
                self.ctx.report(base, "A2A323", f"{node.name.value} derives from apex's {q.rsplit('.', 1)[1]}: change "
                                "the base to the torch class by hand and pass apex's defaults explicitly "
                                "(FusedAdam: weight_decay=0.0; FusedRMSNorm: eps=1e-5)")

    def visit_Call(self, node: cst.Call) -> None:
        q = self.res.apex_name(node.func)
        if q is None:
            return
        short = q.rsplit(".", 1)[-1]
        other = self.res.other_binding(node.func)
        if other is not None:
            code = "A2A304" if q.startswith("apex.optimizers.") else "A2A322"
            if self._ok(node, code):
                self.ctx.report(node, code, f"`{code_of(node.func)}` is apex's {short} on one import path and "
                                            f"{other} on another: a torch rewrite would replace both; migrate by hand")
            return
        if q == "apex.optimizers.FusedAdam":
            self._adam(node)
        elif q == "apex.optimizers.FusedSGD":
            self._sgd(node)
        elif q == "apex.optimizers.FusedAdagrad":
            self._adagrad(node)
        elif q in NO_TWIN_OPTIMIZERS:
            if self._ok(node, "A2A305"):
                self.ctx.report(node, "A2A305", f"{short}: {NO_TWIN_OPTIMIZERS[q]}")
        elif q in LAYER_NORMS:
            self._norm(node, q, LAYER_NORMS[q], "torch.nn.LayerNorm", rms=False)
        elif q in RMS_NORMS:
            self._norm(node, q, RMS_NORMS[q], "torch.nn.RMSNorm", rms=True)
        elif q in FUNCTIONAL:
            self._functional(node, q)
        elif q in CLIP_FUNCS:
            if self._ok(node, "A2A320"):
                self.plan.replace_node[node.func] = self._callee("torch.nn.utils.clip_grad_norm_",
                                                                 "torch.nn.utils.clip_grad_norm_")
                self.ctx.report(node, "A2A320", f"{short} -> torch.nn.utils.clip_grad_norm_", fixed=True)
        elif q == "apex.fp16_utils.to_python_float":
            if len(node.args) == 1 and node.args[0].keyword is None and not node.args[0].star \
                    and self._ok(node, "A2A321"):
                arg = node.args[0].value
                self.plan.replace_node[node] = cst.Call(func=cst.Attribute(value=as_primary(arg), attr=cst.Name("item")))
                self.ctx.report(node, "A2A321", "to_python_float(x) -> x.item()", fixed=True)
        else:
            for prefix, hint in NO_TWIN_MODULES:
                if q == prefix or q.startswith(prefix + "."):
                    code = "A2A305" if prefix == "apex.contrib.optimizers" else "A2A322"
                    if self._ok(node, code):
                        self.ctx.report(node, code, f"{q} has no native torch twin; nearest: {hint}")
                    break

    def layer_norm_type_check(self, node: cst.Call, index: ModuleIndex) -> None:
        """`isinstance(m, FusedLayerNorm)` (or issubclass, or a tuple of classes) -> torch.nn.LayerNorm.
        Called once every apex norm this module builds or derives from is rewritten to torch's: the
        migrated code then builds torch LayerNorms, which the apex class would no longer match."""
        classinfo = _classinfo(node)
        if classinfo is None:
            return
        elements = classinfo.elements if isinstance(classinfo, cst.Tuple) else None
        targets = [e.value for e in elements if isinstance(e, cst.Element)] if elements is not None else [classinfo]
        new_of: Dict[int, cst.BaseExpression] = {}
        for target in targets:
            q = self.res.apex_name(target)
            if q not in LAYER_NORMS or self.res.other_binding(target) is not None or not self._ok(target, "A2A310"):
                continue
            new_of[id(target)] = self._callee("torch.nn.LayerNorm", "torch.nn.LayerNorm")
            self.ctx.report(target, "A2A310", f"{node.func.value} check: {q.rsplit('.', 1)[1]} -> torch.nn.LayerNorm "  # type: ignore[attr-defined]
                            "(the migrated code builds torch LayerNorms; the check now matches every "
                            "torch LayerNorm)", fixed=True)
        if not new_of:
            return
        if elements is None:
            new = new_of[id(classinfo)]
            either = index.parent(node)
            if isinstance(either, cst.BooleanOperation) and isinstance(either.operator, cst.Or):
                other = either.right if either.left is node else either.left
                beside = other  # in `a or b or c` (`(a or b) or c`), the operand next to the check
                while isinstance(beside, cst.BooleanOperation) and isinstance(beside.operator, cst.Or):
                    beside = beside.left if either.left is node else beside.right
                if _same_type_check(beside, node, new) and "#" not in code_of(either) and not any(
                        self.res.apex_name(n) in LAYER_NORMS for n in iter_nodes(other)
                        if isinstance(n, (cst.Name, cst.Attribute))):  # nothing else to rewrite in there
                    # `isinstance(m, nn.LayerNorm) or isinstance(m, FusedLayerNorm)`: one check
                    self.plan.replace_node[either] = other.with_changes(lpar=either.lpar, rpar=either.rpar)
                    return
            self.plan.replace_node[classinfo] = new
            return
        self.plan.replace_node[classinfo] = _classes_tuple(classinfo, new_of)

    # optimizers
    def _manual(self, node: cst.Call, message: str) -> None:
        if self._ok(node, "A2A304"):
            self.ctx.report(node, "A2A304", message)

    def _fused_flag(self, kind: str, min_fused: Tuple[int, int]) -> Tuple[str, str]:
        return ("fused", "True") if self.min_torch >= min_fused else ("foreach", "True")

    def _adam(self, node: cst.Call) -> None:
        if self.legacy_adam and self.ctx.enabled("A2A501"):
            return  # manual_scaling's fused_fp16_optimizer migrates or reports it with its FP16_Optimizer
        if not self._ok(node, "A2A301"):
            return
        if self.legacy_adam:
            return self._manual(node, "FusedAdam in a module using apex.optimizers.FP16_Optimizer is apex < 0.1's "
                                      "FusedAdam, which that wrapper's step() hands the fp16 gradients and norms: "
                                      "migrate both together (A2A501) or by hand")
        legacy = sorted(a.keyword.value for a in node.args if a.keyword is not None
                        and a.keyword.value in ("max_grad_norm", "eps_inside_sqrt"))
        if legacy:  # apex < 0.1's FusedAdam: it clipped by a norm FP16_Optimizer handed to step()
            no_bias = any(a.keyword is not None and a.keyword.value == "bias_correction"
                          and literal_bool(a.value) is not True for a in node.args)
            tail = ("; bias_correction=False has no torch equivalent (torch Adam always corrects the bias): keep "
                    "apex or port the optimizer") if no_bias else "; then torch.optim.AdamW(..., weight_decay=0.0)"
            return self._manual(node, f"FusedAdam({', '.join(legacy)}=...) is apex < 0.1's FusedAdam, which torch "
                                      "cannot reproduce as one call: max_grad_norm -> torch.nn.utils.clip_grad_norm_"
                                      "(params, max_grad_norm) after scaler.unscale_(optimizer) and before the step; "
                                      "eps_inside_sqrt has no torch option" + tail)
        bound = bind_args(node, ADAM_SIG)
        if bound is None or "params" not in bound:
            return self._manual(node, "FusedAdam: arguments not understood (*args/**kwargs or unknown keyword); "
                                      "use torch.optim.AdamW(..., weight_decay=0.0) (adam_w_mode=True, the default) "
                                      "or torch.optim.Adam (adam_w_mode=False)")
        val = {k: a.value for k, a in bound.items()}
        mode = literal_bool(val.get("adam_w_mode")) if "adam_w_mode" in val else True
        if mode is None:
            return self._manual(node, "FusedAdam with a non-literal adam_w_mode: use torch.optim.AdamW when it is "
                                      "true, torch.optim.Adam when false, with weight_decay written out")
        if "bias_correction" in val and literal_bool(val["bias_correction"]) is not True:
            return self._manual(node, "FusedAdam(bias_correction=False) has no torch equivalent (torch Adam always "
                                      "corrects the bias); keep apex or port the optimizer")
        if "amsgrad" in val and literal_bool(val["amsgrad"]) is not False:
            return self._manual(node, "FusedAdam(amsgrad=...) raised in apex; remove it or use torch.optim.AdamW(amsgrad=True)")
        if "master_weights" in val and literal_bool(val["master_weights"]) is not False:
            return self._manual(node, "FusedAdam(master_weights=True) keeps fp32 master weights; with an fp32 model "
                                      "and autocast use torch.optim.AdamW(..., weight_decay=0.0) and drop it")
        target = "AdamW" if mode else "Adam"
        flag = self._fused_flag(target, (2, 0) if mode else (1, 13))
        extra = [("weight_decay", "0.0"), flag]
        drop = {"bias_correction", "adam_w_mode", "amsgrad", "set_grad_none", "master_weights"}
        if "capturable" in val and literal_bool(val["capturable"]) is False:
            drop.add("capturable")
        args = rebuild_args(node, ADAM_SIG, TORCH_ADAM_SIG, drop, extra)
        self.plan.replace_node[node] = node.with_changes(
            func=self._callee(f"torch.optim.{target}", f"torch.optim.{target}"), args=args)
        note = ""
        sgn = literal_bool(val.get("set_grad_none")) if "set_grad_none" in val else True
        if sgn is False:
            note = "; set_grad_none=False: call zero_grad(set_to_none=False) if code relies on zeroed grads"
        self.migrated_optimizers.append((node, "FusedAdam", target))
        self.ctx.report(node, "A2A301", f"FusedAdam -> torch.optim.{target} with weight_decay explicit and "
                        f"{flag[0]}=True (not bitwise identical to apex){note}", fixed=True)

    def _sgd(self, node: cst.Call) -> None:
        if not self._ok(node, "A2A302"):
            return
        bound = bind_args(node, SGD_SIG)
        if bound is None or "params" not in bound:
            return self._manual(node, "FusedSGD: arguments not understood; use torch.optim.SGD with the same "
                                      "lr, momentum, dampening, weight_decay and nesterov")
        val = {k: a.value for k, a in bound.items()}
        if "wd_after_momentum" in val and literal_bool(val["wd_after_momentum"]) is not False:
            return self._manual(node, "FusedSGD(wd_after_momentum=True) has no torch equivalent (torch applies "
                                      "weight decay before momentum)")
        flag = self._fused_flag("SGD", (2, 3))
        args = rebuild_args(node, SGD_SIG, TORCH_SGD_SIG,
                            {"wd_after_momentum", "materialize_master_grads", "set_grad_none"}, [flag])
        self.plan.replace_node[node] = node.with_changes(func=self._callee("torch.optim.SGD", "torch.optim.SGD"),
                                                         args=args)
        self.ctx.report(node, "A2A302", f"FusedSGD -> torch.optim.SGD with {flag[0]}=True", fixed=True)

    def _adagrad(self, node: cst.Call) -> None:
        if not self._ok(node, "A2A303"):
            return
        bound = bind_args(node, ADAGRAD_SIG)
        if bound is None or "params" not in bound:
            return self._manual(node, "FusedAdagrad: arguments not understood; use torch.optim.Adagrad with "
                                      "lr, eps and weight_decay as keywords")
        val = {k: a.value for k, a in bound.items()}
        if "adagrad_w_mode" in val and literal_bool(val["adagrad_w_mode"]) is not False:
            return self._manual(node, "FusedAdagrad(adagrad_w_mode=True) (decoupled weight decay) has no torch "
                                      "equivalent")
        args = rebuild_args(node, ADAGRAD_SIG, TORCH_ADAGRAD_SIG, {"set_grad_none", "adagrad_w_mode"},
                            [("foreach", "True")])
        self.plan.replace_node[node] = node.with_changes(
            func=self._callee("torch.optim.Adagrad", "torch.optim.Adagrad"), args=args)
        self.migrated_optimizers.append((node, "FusedAdagrad", "Adagrad"))
        self.ctx.report(node, "A2A303", "FusedAdagrad -> torch.optim.Adagrad (arguments as keywords)", fixed=True)

    # norms
    def _norm(self, node: cst.Call, q: str, sig: Sequence[str], target: str, rms: bool) -> None:
        short = q.rsplit(".", 1)[-1]
        if rms and self.min_torch < (2, 4):
            if self._ok(node, "A2A313"):
                self.ctx.report(node, "A2A313", f"{short}: torch.nn.RMSNorm needs torch >= 2.4 (--min-torch is "
                                f"{self.min_torch[0]}.{self.min_torch[1]}); keep a local RMSNorm or raise --min-torch")
            return
        code = "A2A311" if rms else "A2A310"
        if not self._ok(node, code):
            return
        bound = bind_args(node, sig)
        if bound is None:
            if self._ok(node, "A2A313"):
                self.ctx.report(node, "A2A313", f"{short}: arguments not understood; use {target} with the same "
                                "normalized_shape and eps (apex default 1e-5)")
            return
        val = {k: a.value for k, a in bound.items()}
        if short.startswith("Mixed") and "elementwise_affine" in val and literal_bool(val["elementwise_affine"]) is not True:
            if self._ok(node, "A2A313"):
                self.ctx.report(node, "A2A313", f"{short}(elementwise_affine=...) raised in apex; use {target} by hand")
            return
        torch_sig = ("normalized_shape", "eps", "elementwise_affine")
        apex_sig = tuple("normalized_shape" if s == "hidden_size" else s for s in sig)
        if "hidden_size" in bound:
            bound["normalized_shape"] = bound.pop("hidden_size")
        extra = [("eps", "1e-5")] if rms else []
        args = rebuild_args(node, apex_sig, torch_sig, {"memory_efficient"}, extra)
        self.plan.replace_node[node] = node.with_changes(func=self._callee(target, target), args=args)
        note = " (eps written out: torch's default is None)" if rms else ""
        self.ctx.report(node, code, f"{short} -> {target}{note}; under autocast the output is fp32 (apex returned "
                        "the autocast/param dtype)", fixed=True)

    def _functional(self, node: cst.Call, q: str) -> None:
        sig, fname, order = FUNCTIONAL[q]
        short = q.rsplit(".", 1)[-1]
        if fname == "rms_norm" and self.min_torch < (2, 4):
            if self._ok(node, "A2A313"):
                self.ctx.report(node, "A2A313", f"{short}: torch.nn.functional.rms_norm needs torch >= 2.4")
            return
        if not self._ok(node, "A2A312"):
            return
        bound = bind_args(node, sig)
        if bound is None or any(p not in bound for p in order):
            if self._ok(node, "A2A313"):
                self.ctx.report(node, "A2A313", f"{short}: arguments not understood; use "
                                f"torch.nn.functional.{fname} with eps=1e-6 (apex's functional default)")
            return
        parts = [code_of(bound[p].value) for p in order]
        eps = code_of(bound["eps"].value) if "eps" in bound else "1e-6"
        func = self.res.spelling(f"torch.nn.functional.{fname}", f"torch.nn.functional.{fname}")
        if func.startswith("torch."):
            self.needs_torch = True
        new = templates.expression(f"{func}({', '.join(parts)}, eps={eps})")
        self.plan.replace_node[node] = new
        self.ctx.report(node, "A2A312", f"{short} -> torch.nn.functional.{fname} (arguments reordered, eps={eps} "
                        "written out)", fixed=True)
