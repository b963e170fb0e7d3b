"""Native-AMP lint of checkpoints (A2A704): saved GradScaler state that nothing restores.

It reads migrated code, whichever tool or hand migrated it, and reports:

- a `scaler.state_dict()` saved under a key (`{"amp": scaler.state_dict()}`, `ckpt["scaler"] = ...`) with
  no restore of the scaler under that key anywhere in the run: a resumed run would restart at the
  initial loss scale. A restore is `scaler.load_state_dict(...)` (its key read from `ckpt["KEY"]`, any
  key when it cannot be told), or the scaler handed to a checkpoint helper (`amp=scaler` to a generic
  `**kwargs` loader: the keyword is the key; to a helper named for loading or resuming: any key).
  Each module publishes its restores' keys as repo facts, so a save in `main.py` restored in
  `utils.py` is fine;
- an `amp` name passed to a call where nothing in the module binds it (apex is not imported): the
  resume fails with NameError.
"""
from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Set, Tuple

import libcst as cst

from . import checkpoint_rules as C
from .base import Codemod, FileContext, RepoFacts, facts_key, module_root
from .index import ModuleIndex, parent_mapping
from .names import ImportTable, dotted_name, literal_string
from .records import same_file
from .restore_helpers import argument_spec, helpers_for_modules
from .walk import iter_nodes

FACT_PREFIX = "scaler_restores:"  # RepoFacts.extra key: FACT_PREFIX + facts_key -> sorted restore keys
ANY_KEY = "*"  # a restore whose key cannot be told
_RESTORING_CALLEE = re.compile(r"load|restore|resume|restart|checkpoint|ckpt", re.I)


def restores_in_facts(facts: RepoFacts) -> Dict[str, List[str]]:
    """{facts key: restore keys} that the run's modules published (modules without restores left out)."""
    return {k[len(FACT_PREFIX):]: v for k, v in facts.extra.items() if k.startswith(FACT_PREFIX) and v}


class NativeCheckpointLint(Codemod):
    """Saved GradScaler state with no restore, and dangling `amp` names at restores (findings only)."""

    NAME = "checkpoint_lint"
    DESCRIPTION = "GradScaler state saved in checkpoints but never restored (findings only)"
    CODES = ("A2A704",)
    TOKENS = (b"scaler",)  # a scaler saved or restored
    WORDS = (b"amp",)  # apex amp (migrated in this run), or `amp` passed to a checkpoint helper
    REPORTS_ONLY = True
    PUBLISHES_FACTS = True  # the keys each module restores the scaler from

    def transform(self, wrapper: cst.MetadataWrapper, ctx: FileContext) -> cst.Module:
        module = wrapper.module
        if not ctx.enabled(C.SAVED_NOT_RESTORED.code):
            return module
        lint = _Lint(module, ctx)
        lint.run()
        return module


class _Lint:
    def __init__(self, module: cst.Module, ctx: FileContext):
        self.module = module
        self.ctx = ctx
        self.index = ModuleIndex.of(module)
        self.table = ImportTable.of(module, ctx.module_name)
        self.parents = parent_mapping(module)
        self.scalers = self._grad_scaler_names()

    def is_scaler(self, node: cst.BaseExpression) -> bool:
        name = dotted_name(node)
        if name is None:
            return False
        return name in self.scalers or "scaler" in name.rpartition(".")[2].lower()

    def run(self) -> None:
        saves: List[Tuple[cst.Call, str]] = []
        restores: Set[str] = set()
        generic = False
        for call in self.index.calls:
            f = call.func
            if isinstance(f, cst.Attribute) and self.is_scaler(f.value):
                if f.attr.value == "state_dict" and not call.args:
                    key = self._saved_under(call)
                    if key is not None:
                        saves.append((call, key))
                elif f.attr.value == "load_state_dict":
                    key = _subscript_key(call.args[0].value) if call.args else None
                    restores.add(key or ANY_KEY)
                continue
            if isinstance(f, cst.Attribute) and f.attr.value == "load_state_dict" and isinstance(f.value, cst.Name):
                generic = True  # `obj.load_state_dict(...)` on a plain name: maybe a loop over {"amp": scaler}
            restores.update(self._handed_to_helper(call))
            self._dangling_amp(call)
        if generic:
            restores.update(self._scalers_in_dicts())
        restores.discard(None)  # type: ignore[arg-type]
        if self.ctx.module_name and restores:
            self.ctx.exported.extra[FACT_PREFIX + facts_key(self.ctx.path, self.ctx.module_name)] = sorted(restores)
        if not saves:
            return
        elsewhere: Set[str] = set()
        for keys in restores_in_facts(self.ctx.facts).values():
            elsewhere.update(keys)
        known = restores | elsewhere
        for call, key in saves:
            if key in known or ANY_KEY in known:
                continue
            if known:
                msg = (f"the scaler state is saved under {key!r} but restored only from "
                       f"{', '.join(repr(k) for k in sorted(known))}: a resumed run starts at the initial loss "
                       f"scale; restore it with `scaler.load_state_dict(ckpt[{key!r}])`")
            else:
                msg = (f"the scaler state is saved under {key!r} but no `load_state_dict` of the scaler (or "
                       "checkpoint helper given the scaler) restores it anywhere in this run: a resumed run "
                       f"starts at the initial loss scale; add `scaler.load_state_dict(ckpt[{key!r}])` where "
                       "the checkpoint is loaded")
            self.ctx.report(call, C.SAVED_NOT_RESTORED.code, msg)

    def _scalers_in_dicts(self) -> Set[str]:
        """The literal keys the scaler is listed under in dict displays (`{"amp": scaler}`)."""
        out: Set[str] = set()
        for n in iter_nodes(self.module):
            if isinstance(n, cst.DictElement) and self.is_scaler(n.value):
                out.add(literal_string(n.key) or ANY_KEY)
        return out

    def _saved_under(self, call: cst.Call) -> Optional[str]:
        p = self.parents.get(call)
        if isinstance(p, cst.DictElement) and p.value is call:
            return literal_string(p.key)
        if isinstance(p, cst.Assign) and p.value is call and len(p.targets) == 1:
            return _subscript_key(p.targets[0].target)
        return None

    def _handed_to_helper(self, call: cst.Call) -> Set[str]:
        out: Set[str] = set()
        pos = 0
        spec = self._spec_of(call)
        callee = (dotted_name(call.func) or "").rpartition(".")[2]
        for arg in call.args:
            if arg.star:
                pos = -10_000
                continue
            if self.is_scaler(arg.value):
                kw = arg.keyword.value if arg.keyword else None
                use = argument_spec(spec, kw, pos) if spec is not None and (kw or pos >= 0) else None
                if use is not None and use.get("restores"):
                    out.add(use.get("key") or ANY_KEY)
                elif spec is None and _RESTORING_CALLEE.search(callee):
                    out.add(ANY_KEY)
            if arg.keyword is None:
                pos += 1
        return out

    def _spec_of(self, call: cst.Call) -> Optional[Dict[str, Any]]:
        quals = self.table.qualified_names(call.func)
        if not quals:
            return None
        mine = module_root(self.ctx.path, self.ctx.module_name)
        # the helpers a qualified name may name (by module, or by path: `records.same_file`), in facts order
        heads = sorted({q.rpartition(".")[0] for q in quals})
        for key, funcs in helpers_for_modules(self.ctx.facts, heads, mine).items():
            mod = key.rpartition("::")[2]
            for q in quals:
                head, _, fn = q.rpartition(".")
                if (head == mod or same_file(key, head, mine)) and fn in funcs:
                    return funcs[fn]
        return None

    def _dangling_amp(self, call: cst.Call) -> None:
        for arg in call.args:
            v = arg.value
            if isinstance(v, cst.Name) and v.value == "amp" and not self._bound("amp"):
                self.ctx.report(arg, C.SAVED_NOT_RESTORED.code,
                                f"`amp` is passed to `{dotted_name(call.func) or 'a call'}` but nothing binds it "
                                "here (apex is not imported): this fails with NameError; pass the GradScaler "
                                "(`amp=scaler`)")

    def _bound(self, name: str) -> bool:
        cache = getattr(self, "_bound_names", None)
        if cache is None:
            cache = self._bound_names = _bound_names(self.module) | set(self.table.bindings)
        return name in cache

    def _grad_scaler_names(self) -> Set[str]:
        out: Set[str] = set()
        for call in self.index.calls:
            if any(q.endswith("GradScaler") for q in self.table.qualified_names(call.func)) or \
                    (dotted_name(call.func) or "").endswith("GradScaler"):
                p = self.parents.get(call)
                if isinstance(p, cst.Assign):
                    for t in p.targets:
                        n = dotted_name(t.target)
                        if n:
                            out.add(n)
        return out


def _subscript_key(node: cst.BaseExpression) -> Optional[str]:
    if isinstance(node, cst.Subscript) and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
        return literal_string(node.slice[0].slice.value)
    return None


def _bound_names(module: cst.Module) -> Set[str]:
    """Every name the module binds anywhere: assignments, parameters, loop and `with` targets, defs."""
    out: Set[str] = set()
    for n in iter_nodes(module):
        if isinstance(n, (cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.For, cst.CompFor, cst.AsName,
                          cst.NamedExpr)):
            t = getattr(n, "target", None) or getattr(n, "name", None)
            for m in iter_nodes(t) if t is not None else ():
                if isinstance(m, cst.Name):
                    out.add(m.value)
        elif isinstance(n, cst.Param):
            out.add(n.name.value)
        elif isinstance(n, (cst.FunctionDef, cst.ClassDef)):
            out.add(n.name.value)
    return out
