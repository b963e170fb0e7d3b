"""Lints on native AMP code, however it was migrated (findings only): A2A702, A2A703.

- A2A702: `torch.autocast(...)`, `torch.cuda.amp.autocast(...)`, `torch.amp.GradScaler(...)` (and the
  other spellings of these) with an `enabled=` that the module shows may not be a bool
  (`bool_exprs.shown_non_bool`: a literal, an option declared without a bool action, a name compared with a
  string, an `and`/`or` that can return such an operand): autocast raises a TypeError on entry for `""`,
  `None`, `1`, `"O1"`. What the module does not show (a flag parsed elsewhere) is not reported.
- A2A703: a mode switch that still offers an `apex` choice (an argparse option whose `choices` or
  `default` name it, or a plain name set to it) while the module no longer compares the selector with
  `apex` and one of its other values leads to autocast or a GradScaler: the apex choice now trains in
  fp32.

A2A703 stays quiet wherever it cannot be sure: while apex is still imported, when the selector is read in
any way other than `== "value"` / `in (...)` tests (a `!=` test, passed to a call, formatted), when the
object holding the option goes to a function that is not defined in this module, or when the selector is
assigned. It reads one module at a time.
"""
from __future__ import annotations

from typing import List, Optional, Set

import libcst as cst

from .amp_modes import _literal_bindings  # the same binding rules as the migration
from .base import Codemod, FileContext
from .bool_exprs import provably_bool, shown_non_bool
from .index import ModuleIndex
from .mode_rules import APEX_MODE_NO_AMP, ENABLED_NOT_BOOL
from .names import ImportTable, dotted_name, literal_string

_AUTOCASTS = ("torch.autocast", "torch.amp.autocast", "torch.amp.autocast_mode.autocast", "torch.cuda.amp.autocast",
              "torch.cpu.amp.autocast")
_SCALERS = ("torch.amp.GradScaler", "torch.cuda.amp.GradScaler", "torch.amp.grad_scaler.GradScaler",
            "torch.cpu.amp.GradScaler", "torch.GradScaler")
_POSITIONAL_ENABLED = ("torch.cuda.amp.autocast", "torch.cpu.amp.autocast")  # `autocast(enabled, dtype, ...)`
_APEX = "apex"


class _Lint:
    def __init__(self, module: cst.Module, ctx: FileContext):
        self.module = module
        self.ctx = ctx
        self.index = ModuleIndex.of(module)
        self.table = ImportTable.of(module, ctx.module_name)

    def qualified(self, func: cst.BaseExpression) -> Set[str]:
        return set(self.table.qualified_names(func))

    def amp_kind(self, func: cst.BaseExpression) -> Optional[str]:
        q = self.qualified(func)
        for name in _AUTOCASTS + _SCALERS:
            if name in q:
                return name
        return None

    # -- A2A702 ------------------------------------------------------------------------------------
    def enabled_values(self) -> None:
        for call in self.index.calls:
            kind = self.amp_kind(call.func)
            if kind is None:
                continue
            value = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "enabled"), None)
            if value is None and kind in _POSITIONAL_ENABLED and call.args and call.args[0].keyword is None \
                    and not call.args[0].star:
                value = call.args[0].value
            if value is None or provably_bool(value, self.module) or not shown_non_bool(value, self.module):
                continue
            if self.ctx.suppressed(call, ENABLED_NOT_BOOL.code):
                continue
            code = self.module.code_for_node(value).strip()
            what = kind.rpartition(".")[2]
            self.ctx.report(value, ENABLED_NOT_BOOL.code,
                            f"`enabled={code}` of `{what}` may not be a bool (a string, None or a number here): "
                            f"autocast raises a TypeError for those; pass `bool({code})`")

    # -- A2A703 ------------------------------------------------------------------------------------
    def apex_modes(self) -> None:
        if self.table.names_under(_APEX) or any(m == _APEX or m.startswith(_APEX + ".") for m in self.table.star_modules):
            return  # apex is still imported: its path may still exist
        for call in self.index.calls:
            if isinstance(call.func, cst.Attribute) and call.func.attr.value == "add_argument":
                self._option(call)
        for node in self.index.nodes:
            if type(node) is cst.Assign and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name) \
                    and literal_string(node.value) == _APEX and isinstance(node.value, cst.SimpleString):
                self._name_selector(node, node.targets[0].target.value)

    def _option(self, call: cst.Call) -> None:
        options = [o for o in (literal_string(a.value) for a in call.args if a.keyword is None) if o]
        if not options:
            return
        longs = [o for o in options if o.startswith("--")]
        dest = (longs or options)[0].lstrip("-").replace("-", "_")
        kw = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
        if "dest" in kw:
            dest = literal_string(kw["dest"]) or dest
        choices = kw.get("choices")
        offered = literal_string(kw.get("default")) == _APEX
        if isinstance(choices, (cst.List, cst.Tuple, cst.Set)):
            offered = offered or any(literal_string(e.value) == _APEX for e in choices.elements)
        if not offered:
            return
        reads = [n for n in self.index.attributes if n.attr.value == dest
                 and (dotted_name(n.value) or ".").split(".")[0] not in self.table.bindings]  # not `torch.amp`
        if any(self._is_target(n) for n in reads):
            return
        receivers = {dotted_name(n.value) for n in reads}
        if None in receivers or not all(self._receiver_stays_here(r) for r in receivers if r):  # type: ignore[arg-type]
            return
        if self._no_apex_path(reads):
            self.ctx.report(call, APEX_MODE_NO_AMP.code,
                            f"`{(longs or options)[0]}` still accepts 'apex', but no code here compares it with "
                            "'apex' any more while its other values lead to autocast / GradScaler: choosing apex now "
                            "trains in fp32; drop 'apex' from its choices and default, or map it to the native value")

    def _name_selector(self, assign: cst.Assign, name: str) -> None:
        binds = _literal_bindings(self, name, self.index.enclosing_function(assign))
        if not binds:
            return
        reads = [n for n in self.index.names if n.value == name and not self._is_binding(n)]
        if self._no_apex_path(reads):
            self.ctx.report(assign, APEX_MODE_NO_AMP.code,
                            f"`{name}` is set to 'apex', but no code here compares it with 'apex' any more while "
                            "its other values lead to autocast / GradScaler: this choice now trains in fp32; set "
                            "the native value instead")

    # the analysis object `_literal_bindings` expects
    def func_of(self, node: cst.CSTNode) -> Optional[cst.FunctionDef]:
        return self.index.enclosing_function(node)

    def _is_binding(self, n: cst.Name) -> bool:
        p = self.index.parent(n)
        return isinstance(p, (cst.AssignTarget, cst.Param, cst.AsName, cst.FunctionDef, cst.ClassDef)) or \
            (isinstance(p, (cst.AugAssign, cst.AnnAssign, cst.For, cst.NamedExpr)) and p.target is n)

    def _is_target(self, n: cst.Attribute) -> bool:
        p = self.index.parent(n)
        return isinstance(p, cst.AssignTarget) or (isinstance(p, (cst.AugAssign, cst.AnnAssign)) and p.target is n)

    def _receiver_stays_here(self, receiver: str) -> bool:
        """Whether the object `receiver` (`args`) goes to no call but this module's own functions."""
        if "." in receiver:
            return True
        own = {f.name.value for f in self.index.functions}
        for n in self.index.names:
            if n.value != receiver:
                continue
            p = self.index.parent(n)
            if isinstance(p, cst.Attribute) and p.value is n:
                continue
            if isinstance(p, (cst.AssignTarget, cst.Param)):
                continue
            if isinstance(p, cst.Arg):
                call = self.index.parent(p)
                if isinstance(call, cst.Call) and isinstance(call.func, cst.Name) and call.func.value in own:
                    continue
            return False
        return True

    def _no_apex_path(self, reads: List[cst.CSTNode]) -> bool:
        """Every read of the selector is a `== "value"` / `in (...)` test that leaves out apex, and one
        of them leads to native AMP."""
        if not reads:
            return False
        native = False
        for r in reads:
            cmp = self.index.parent(r)
            if not isinstance(cmp, cst.Comparison) or len(cmp.comparisons) != 1:
                return False
            ct = cmp.comparisons[0]
            other = ct.comparator if cmp.left is r else cmp.left
            if isinstance(ct.operator, cst.Equal):
                values = [literal_string(other)] if isinstance(other, cst.SimpleString) else [None]
            elif isinstance(ct.operator, cst.In) and cmp.left is r and isinstance(other, (cst.List, cst.Tuple, cst.Set)):
                values = [literal_string(e.value) if isinstance(e.value, cst.SimpleString) else None
                          for e in other.elements]
            else:
                return False
            if None in values or _APEX in values:
                return False
            native = native or self._leads_to_native(cmp)
        return native

    def _leads_to_native(self, cmp: cst.Comparison) -> bool:
        child: cst.CSTNode = cmp
        for a in self.index.ancestors(cmp):
            if isinstance(a, cst.Arg):
                call = self.index.parent(a)
                return a.keyword is not None and a.keyword.value == "enabled" and isinstance(call, cst.Call) and \
                    self.amp_kind(call.func) is not None
            if isinstance(a, cst.BooleanOperation) and isinstance(a.operator, cst.And):
                child = a
                continue
            if isinstance(a, cst.If) and a.test is child:
                return self._has_native(a.body)
            return False
        return False

    def _has_native(self, node: cst.CSTNode) -> bool:
        for n in self.index.nodes:
            if type(n) in (cst.Attribute, cst.Name) and self.index.contains(node, n):
                if self.amp_kind(n) is not None:  # type: ignore[arg-type]
                    return True
            elif type(n) is cst.Call and self.index.contains(node, n):
                f = n.func  # type: ignore[attr-defined]
                if isinstance(f, cst.Attribute) and f.attr.value in ("scale", "step", "update") and \
                        "scaler" in (dotted_name(f.value) or "").lower():
                    return True
        return False


class AutocastModeLint(Codemod):
    """`enabled=` values that are not bools, and apex choices left without mixed precision (findings only)."""

    NAME = "lint_autocast_modes"
    DESCRIPTION = "native AMP lints: enabled= not a bool, an apex mode without mixed precision (findings only)"
    CODES = (ENABLED_NOT_BOOL.code, APEX_MODE_NO_AMP.code)
    TOKENS = (b"autocast", b"GradScaler")
    WORDS = (b"apex",)  # apex code the run migrates gains autocast / GradScaler
    REPORTS_ONLY = True

    def transform(self, wrapper: cst.MetadataWrapper, ctx: FileContext) -> cst.Module:
        module = wrapper.module
        lint = _Lint(module, ctx)
        if ctx.enabled(ENABLED_NOT_BOOL.code):
            lint.enabled_values()
        if ctx.enabled(APEX_MODE_NO_AMP.code):
            lint.apex_modes()
        return module
