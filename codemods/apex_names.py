"""Which apex name an expression refers to: imports, `import apex as x`, star imports of apex's
modules (their public names), and the submodule spellings of one object folded into one name.

Shared by the apex module rewrites (codemods/apex_modules.py) and manual_scaling.
"""
from __future__ import annotations

from typing import Dict, Optional, Set, Tuple

import libcst as cst

from .index import ModuleIndex
from .names import ImportTable, assigned_names, dotted_name

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
