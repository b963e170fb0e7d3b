"""Torch-version gates in mode switches: `version.parse(torch.__version__) >= version.parse("1.6")`.

Trainers written when native AMP was new pick it only on a torch new enough for it and fall back to apex
or fp32 otherwise (`if fp16 and torch_ge_16: native elif fp16 and has_apex: apex else: fp32`). The
migrated code needs torch >= `Options.min_torch` anyway, so such a gate is a constant there: a test
that torch is at least a version at or below min_torch is True, one that it is older is False. The
amp codemod folds these before it asks whether a native branch runs in the apex branch's place
(codemods/amp_modes.py). Recognised: `parse` / `Version` / `LooseVersion` / `StrictVersion` /
`parse_version` of `torch.__version__` compared with the same of a literal version, and
`hasattr(torch.cuda.amp, "autocast")`-style probes of native AMP's names.
"""
from __future__ import annotations

import re
from typing import Optional, Tuple

import libcst as cst

from .names import dotted_name, literal_string

_PARSERS = {"parse", "Version", "LooseVersion", "StrictVersion", "parse_version"}
_NATIVE_HOLDERS = {"torch.cuda", "torch.cuda.amp", "torch.amp", "torch"}
_NATIVE_NAMES = {"amp", "autocast", "GradScaler"}


def fold_version_gates(expr: cst.BaseExpression, table, min_torch: Tuple[int, int]) -> cst.BaseExpression:
    """`expr` with torch-version gates replaced by True / False (for torch >= min_torch)."""
    return expr.visit(_Fold(table, min_torch))  # type: ignore[return-value]


class _Fold(cst.CSTTransformer):
    def __init__(self, table, min_torch: Tuple[int, int]):
        super().__init__()
        self.table = table
        self.min = tuple(min_torch)

    def leave_Comparison(self, original: cst.Comparison, updated: cst.Comparison) -> cst.BaseExpression:
        if len(updated.comparisons) != 1:
            return updated
        op = updated.comparisons[0].operator
        left, right = updated.left, updated.comparisons[0].comparator
        if self._is_torch_version(left):
            bound, flip = self._literal_version(right), False
        elif self._is_torch_version(right):
            bound, flip = self._literal_version(left), True
        else:
            return updated
        if bound is None:
            return updated
        kind = type(op).__name__
        if flip:
            kind = {"GreaterThanEqual": "LessThanEqual", "GreaterThan": "LessThan", "LessThanEqual": "GreaterThanEqual",
                    "LessThan": "GreaterThan"}.get(kind, kind)
        at_least = bound <= self.min  # torch >= bound holds for every supported torch
        newer = bound < self.min  # torch > bound holds (compared on major.minor)
        value = {"GreaterThanEqual": at_least if at_least else None, "GreaterThan": True if newer else None,
                 "LessThan": False if at_least else None, "LessThanEqual": False if newer else None}.get(kind)
        if value is None:
            return updated
        return cst.Name("True" if value else "False")

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        if not (isinstance(updated.func, cst.Name) and updated.func.value == "hasattr" and len(updated.args) == 2):
            return updated
        holder = updated.args[0].value
        name = literal_string(updated.args[1].value)
        if name in _NATIVE_NAMES and any(q in _NATIVE_HOLDERS for q in self.table.qualified_names(holder)):
            return cst.Name("True")
        return updated

    def _is_torch_version(self, node: cst.BaseExpression) -> bool:
        if not (isinstance(node, cst.Call) and len(node.args) == 1 and node.args[0].keyword is None):
            return False
        if (dotted_name(node.func) or "").rpartition(".")[2] not in _PARSERS:
            return False
        return "torch.__version__" in self.table.qualified_names(node.args[0].value)

    def _literal_version(self, node: cst.BaseExpression) -> Optional[Tuple[int, int]]:
        if not (isinstance(node, cst.Call) and len(node.args) == 1 and
                (dotted_name(node.func) or "").rpartition(".")[2] in _PARSERS):
            return None
        text = literal_string(node.args[0].value)
        m = re.fullmatch(r"(\d+)\.(\d+)(?:\.\d+)?", text or "")
        return (int(m.group(1)), int(m.group(2))) if m else None
