"""Scaler threading: the functions that need the scaler take it as a parameter, their callers pass it."""
from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Set, Tuple

import libcst as cst

from . import amp_engine_override, amp_threading
from . import amp_rules as R
from .base import FileContext, RepoFacts, module_root
from .signatures import add_keyword, add_param, all_params
from .amp_plan_state import AmpPlanState
from .amp_facts_index import scaler_modules


class ThreadingPlanning(AmpPlanState):
    """The scaler-threading planning step of the amp analysis (codemods/amp.py)."""

    def plan_threading(self) -> None:
        if not self.use_scaler:
            return
        if self.scaler_is_attr and not self.scaler_global:
            # a base's method that needs the scaler: an override on the holder, or a refusal
            self._refusal = amp_engine_override.override_base_steps(self, R.ENGINE_OVERRIDE) or \
                amp_threading.check_holder_reach(self)
            if self._refusal:
                return
        if self.scaler_global or self.scaler_is_attr:
            # the scaler is reachable everywhere in this module: only calls into other modules need it
            for call in self._cross_module_calls():
                self.plan.transforms[call] = add_keyword(self._cross_params[id(call)], self.scaler_expr())
                self.report(call, R.THREADED, "the scaler is passed to a function that now takes it", fixed=True)
            return
        have: Set[Optional[cst.FunctionDef]] = {self.init_func} if self.has_init else set()
        funcs = self._functions()
        # call sites in this module of functions from other modules that take the scaler
        cross = self._cross_module_calls()
        needing: List[cst.FunctionDef] = []
        work = [f for f in self.user_funcs if f not in have]
        for call in cross:
            f = self.func_of(call)
            if f not in have and f not in work:
                work.append(f)  # type: ignore[arg-type]
        seen: Set[int] = set()
        while work:
            f = work.pop()
            if f is None:
                if not self.has_init:  # module-level code scales or steps, and no initialize here makes a scaler
                    self._threading_failed = ("the scaler is needed at module level, but this module has no "
                                              "`amp.initialize` to create it (it runs elsewhere)")
                    self._threading_failed_at = next((s.call for s in self.sites if s.func is None), None)
                    break
                self._threading_failed = "the scaler is needed at module level but created in a function"
                break
            if id(f) in seen or f in have:
                continue
            seen.add(id(f))
            outer = self.func_of(f)
            if outer is not None:
                # a nested function sees the scaler of the function around it: its signature stays
                self._closures.append(f)
                if outer not in have and id(outer) not in seen:
                    work.append(outer)
                continue
            needing.append(f)
            base = self._framework_base(f)
            if base is not None and not self._call_sites(f, funcs):
                self._threading_failed = (f"`{f.name.value}` needs the scaler, but it is a method of a subclass of "
                                          f"`{base}`, which may call it with its own fixed arguments (a framework "
                                          "hook), and nothing in this run calls it")
                self._threading_failed_at = f
                break
            self._refusal = amp_threading.value_use(self, f)
            if self._refusal is None and self.class_of(f) is not None:
                self._sites_of[id(f)], self._refusal = amp_threading.method_call_sites(self, f)
            if self._refusal is not None:
                break
            for call in self._sites_of.get(id(f)) or self._call_sites(f, funcs):
                caller = self.func_of(call)
                if id(call) in self._threaded_calls:
                    continue
                self._threaded_calls.add(id(call))
                self.plan.transforms[call] = add_keyword(self.scaler_ref, self.scaler_ref)
                if caller is None and self.has_init:
                    self._threading_failed = (f"`{f.name.value}` needs the scaler created in "
                                              f"`{self.init_func.name.value if self.init_func else 'the module'}`, "
                                              "but it is called from module level where the scaler does not exist")
                    break
                if caller is None:
                    self._threading_failed = (f"`{f.name.value}` needs a GradScaler, but it is called from module "
                                              "level and no scaler is created in this module")
                    self._threading_failed_at = call
                    break
                if caller not in have and caller is not None and id(caller) not in seen:
                    work.append(caller)
            if self._threading_failed:
                break
        if self._threading_failed or self._refusal:
            return
        for f in self._closures:
            self.report(f, R.SCALER_CLOSURE, f"`{f.name.value}` reads `{self.scaler_ref}` of the enclosing "
                                             "function; its signature is unchanged", fixed=True)
        for call in cross:
            if id(call) not in self._threaded_calls:
                self._threaded_calls.add(id(call))
                self.plan.transforms[call] = add_keyword(self._cross_params[id(call)], self.scaler_ref)
                self.report(call, R.THREADED, "`scaler=scaler` passed to a function that now takes the scaler",
                            fixed=True)
        for f in needing:
            if any(p.name.value == self.scaler_ref for p in all_params(f)):
                continue
            self.plan.transforms[f] = add_param(self.scaler_ref)
            module_level = isinstance(self.parent(f), cst.Module)
            if module_level:
                self.exported_funcs.append(f.name.value)
            elif self.class_of(f) is not None:
                self.exported_methods.append(f.name.value)
            if self._sites_of.get(id(f)) or self._call_sites(f, funcs):
                self.report(f, R.THREADED, f"`{f.name.value}` now takes the `{self.scaler_ref}` parameter; call sites "
                                           "in this run pass it", fixed=True)
            elif module_level:
                self.report(f, R.THREADED, f"`{f.name.value}` now takes the `{self.scaler_ref}` parameter; calls from "
                                           "other files of this run pass it, calls from code outside the run must "
                                           "pass the GradScaler too", fixed=True)
            else:
                self.report(f, R.THREADED, f"method `{f.name.value}` now takes a `{self.scaler_ref}` parameter but no "
                                           f"caller was found in this run: pass the GradScaler "
                                           f"(`{self.scaler_ref}={self.scaler_ref}`) where it is called")

    def _framework_base(self, f: cst.FunctionDef) -> Optional[str]:
        """The imported base class from another package (mmcv's `OptimizerHook`, torch's `Optimizer`,
        Lightning's `LightningModule`) of the class `f` is a method of, or None."""
        cls = self.class_of(f)
        if cls is None:
            return None
        mine = self.ctx.module_name.split(".")[0]
        for b in cls.bases:
            if b.keyword is not None:
                continue
            for q in sorted(self.table.qualified_names(b.value)):
                if q.split(".")[0] != mine:
                    return q
        return None

    def _functions(self) -> Dict[str, List[cst.FunctionDef]]:
        out: Dict[str, List[cst.FunctionDef]] = {}

        def visit_FunctionDef(n: cst.FunctionDef) -> None:
            out.setdefault(n.name.value, []).append(n)

        self._replay(functions=visit_FunctionDef)
        return out

    def _call_sites(self, f: cst.FunctionDef, funcs: Dict[str, List[cst.FunctionDef]]) -> List[cst.Call]:
        name = f.name.value
        is_method = self.class_of(f) is not None
        sites: List[cst.Call] = []

        def visit_Call(n: cst.Call) -> None:
            fn = n.func
            if not is_method and isinstance(fn, cst.Name) and fn.value == name:
                sites.append(n)
            elif is_method and isinstance(fn, cst.Attribute) and fn.attr.value == name and \
                    isinstance(fn.value, cst.Name) and fn.value.value == "self":
                sites.append(n)

        self._replay(calls=visit_Call)
        return sites

    def _cross_module_calls(self) -> List[cst.Call]:
        facts: RepoFacts = self.ctx.facts
        if not facts.scaler_functions:
            return []
        targets = {f"{m}.{fn}": (facts.scaler_params.get(key, "scaler"), facts.scaler_slots.get(key, {}).get(fn))
                   for key, (m, fns) in visible_modules(facts, self.ctx, called_modules(self)).items() for fn in fns}
        if not targets:
            return []
        top = _outer_package(self.ctx.module_name)
        for q in list(targets):  # `from pybert.train import x` in a script of a folder that has an __init__.py
            if top and q.startswith(top + ".") and q[len(top) + 1:] not in targets:
                targets[q[len(top) + 1:]] = targets[q]
        names = set(targets)
        out: List[cst.Call] = []
        table = self.table
        params = self._cross_params

        def visit_Call(n: cst.Call) -> None:
            hit = table.qualified_names(n.func) & names
            if hit:
                param, slot = targets[sorted(hit)[0]]
                if not any(a.keyword is not None and a.keyword.value == param for a in n.args) \
                        and not _fills_slot(n, slot):
                    params[id(n)] = param
                    out.append(n)

        self._replay(calls=visit_Call)
        return out

    def plan_threading_only(self) -> None:
        cross = self._cross_module_calls()
        for call in cross:
            self.report(call, R.THREADED, "this call now needs `scaler=...`: pass the GradScaler of this run")

    def _take_scaler_from_subclass(self) -> None:
        """A mixin or base (no `amp.initialize` here) of classes of the run that keep the scaler on `self`:
        its methods read `self.<attr>` (A2A128)."""
        attr = amp_threading.rescued(self.ctx.facts, self.ctx.module_name)
        if attr is None or amp_threading.candidate_classes(self) != self.ctx.facts.attr_candidates[
                self.ctx.module_name]:
            return
        self.scaler_is_attr, self.scaler_ref = True, attr
        for c in self.index.classes:
            if c.name.value in self.ctx.facts.attr_candidates[self.ctx.module_name]:
                self.report(c, R.SCALER_ON_OBJECT, f"`{c.name.value}` is a base of classes that keep the scaler on "
                                                   f"`self`: its methods read `self.{attr}` (every class using it "
                                                   "must hold the scaler too)", fixed=True)


def _fills_slot(call: cst.Call, slot: Optional[int]) -> bool:
    """Whether `call` may already pass a helper's scaler parameter by position (`slot`, from
    `RepoFacts.scaler_slots`; None for the functions this run changes, which take it last)."""
    if slot is None:
        return False
    if any(a.star for a in call.args):
        return True  # *args or **kwargs may hold it
    return slot >= 0 and sum(1 for a in call.args if a.keyword is None) > slot


def visible_modules(facts: RepoFacts, ctx: FileContext, names: Iterable[str]) -> Dict[str, Tuple[str, List[str]]]:
    """Modules of other files whose functions now take the scaler, as this file can import them, among
    the module names `names`: same import root first; another root only when no other root has a
    module of that name."""
    mine = module_root(ctx.path, ctx.module_name)
    index = scaler_modules(facts.scaler_functions)
    out: Dict[str, Tuple[str, List[str]]] = {}
    for name in sorted((n for n in set(names) if n in index.rank), key=index.rank.__getitem__):
        same = index.by_name_root.get((name, mine))
        if same is not None and name == ctx.module_name:
            continue  # this very file
        entries = index.by_name[name]
        key = same if same is not None else entries[0] if len(entries) == 1 else None
        if key is not None:
            out[key] = (name, facts.scaler_functions[key])
    return out


def called_modules(a: AmpPlanState) -> Set[str]:
    """Every dotted prefix of the qualified names this module's calls may have: the only module names
    whose functions (`module.function`) a call here can reach."""
    out: Set[str] = set()
    table = a.table
    for call in a.index.calls:
        for q in table.qualified_names(call.func):
            parts = q.split(".")
            out.update(".".join(parts[:i]) for i in range(1, len(parts)))
    top = _outer_package(a.ctx.module_name)
    if top:
        # a script's own folder comes first on sys.path: where that folder is itself a package (an
        # __init__.py beside the scripts), `import pybert.x` there is this run's `<top>.pybert.x`
        out |= {f"{top}.{n}" for n in out if not n.startswith(top + ".")}
    return out


def _outer_package(module_name: str) -> str:
    """The outermost package of `module_name` ("" for a top-level module): where it is the folder of the
    run's scripts (an __init__.py beside them), their `import pybert.x` is this run's `<package>.pybert.x`."""
    return module_name.partition(".")[0] if "." in module_name else ""
