"""Native AMP lint (A2A701): a call that omits a required GradScaler parameter (findings only).

A function or method of the run that takes the scaler as a required parameter (`def train(self,
loader, scaler)`: a name holding `scaler`, or a `GradScaler` annotation, without a default) breaks
every caller that does not pass it. This lint reads code already on torch.amp, whoever migrated it:
pass 1 publishes each module's such functions (`RepoFacts.scaler_required`), and every call the
module can attribute to one of them (a plain or imported function; `self.m(...)` in the class or a
subclass; `v.m(...)` where the same function binds `v = C(...)`; `C(...).m(...)`) must pass it, by
keyword or in its positional slot, or through `*args` / `**kwargs`.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from .base import Codemod, FileContext, RepoFacts, WARNING, facts_key, rule
from .index import ModuleIndex
from .names import ImportTable, dotted_name
from .walk import iter_nodes

MISSING_SCALER = rule(
    "A2A701", "scaler-argument-missing", "a call omits a required GradScaler parameter of a function in the run",
    fixes=False, severity=WARNING,
    why="""
A function or method that takes the GradScaler as a required parameter raises TypeError at every
call that does not pass it. This happens after a migration that added the parameter (by any version
of this tool, or by hand) while a caller, often in another module, was not updated. The lint finds
such calls across the files of the run: plain and imported functions, `self.method(...)` inside the
class, and `obj.method(...)` where `obj = Class(...)` in the same function. Pass the scaler (or keep
it on the object, `self.scaler`, and drop the parameter).""",
    before="""
class Trainer:
    def train(self, loader, scaler):
        ...
trainer = Trainer(model, optimizer)
trainer.train(loader)""",
    after="""
trainer.train(loader, scaler=scaler)""")

Required = Tuple[str, int]  # (parameter name, positional slot counting `self`; -1: keyword-only)


def scaler_parameter(f: cst.FunctionDef) -> Optional[Required]:
    """The required scaler parameter of `f`, or None."""
    ps = f.params
    positional = list(ps.posonly_params) + list(ps.params)
    for slot, p in [(i, p) for i, p in enumerate(positional)] + [(-1, p) for p in ps.kwonly_params]:
        ann = dotted_name(p.annotation.annotation) if p.annotation is not None else None
        if p.default is None and ("scaler" in p.name.value.lower() or (ann or "").endswith("GradScaler")):
            return p.name.value, slot
    return None


def _passes(call: cst.Call, req: Required, bound: bool) -> bool:
    """Whether `call` passes the parameter (or may: `*args`, `**kwargs`); `bound`: a method called on
    an instance, whose `self` is not among the arguments."""
    name, slot = req
    if any(a.star for a in call.args) or any(a.keyword is not None and a.keyword.value == name for a in call.args):
        return True
    if bound:
        slot -= 1
    return slot >= 0 and sum(1 for a in call.args if a.keyword is None) > slot


class _Module:
    """One module's definitions and the calls it can attribute to them."""

    def __init__(self, module: cst.Module, ctx: FileContext):
        self.ctx = ctx
        self.index = ModuleIndex.of(module)
        self.table = ImportTable.of(module, ctx.module_name)
        self.key = facts_key(ctx.path, ctx.module_name)
        self.funcs: Dict[str, Required] = {}
        self.methods: Dict[str, Dict[str, Required]] = {}  # class name -> method -> parameter
        self.bases: Dict[str, List[cst.BaseExpression]] = {}
        for node in module.body:
            if isinstance(node, cst.FunctionDef) and not node.decorators:
                req = scaler_parameter(node)
                if req:
                    self.funcs[node.name.value] = req
            elif isinstance(node, cst.ClassDef):
                self.bases[node.name.value] = [b.value for b in node.bases if b.keyword is None]
                for item in node.body.body:
                    if isinstance(item, cst.FunctionDef) and not item.decorators:
                        req = scaler_parameter(item)
                        if req:
                            self.methods.setdefault(node.name.value, {})[item.name.value] = req
        # other modules' definitions, looked up by qualified name in the run's facts (`_FarDefinitions`)
        self.far = _FarDefinitions.of(ctx.facts)

    def far_func(self, q: str) -> Optional[Required]:
        """The required scaler parameter of another module's function `q` (`mod.name`), or None."""
        return self.far.func(q, self.key)

    def far_methods(self, q: str) -> Dict[str, Required]:
        """Method -> required scaler parameter, of another module's class `q` (`mod.Class`)."""
        return self.far.methods(q, self.key)

    def published(self) -> Dict[str, Required]:
        out: Dict[str, Required] = dict(self.funcs)
        for cls, ms in self.methods.items():
            out.update({f"{cls}.{m}": r for m, r in ms.items()})
        return out

    def methods_of(self, cls: cst.BaseExpression, seen: Optional[Set[str]] = None) -> Dict[str, Required]:
        """The methods with a required scaler parameter of the class `cls` names, bases included."""
        seen = set() if seen is None else seen
        out: Dict[str, Required] = {}
        for q in self.table.qualified_names(cls):
            out.update(self.far_methods(q))
        name = dotted_name(cls)
        if isinstance(cls, cst.Name) and name in self.bases and not self.table.qualified_names(cls) and name not in seen:
            seen.add(name)
            for b in self.bases[name]:
                out.update(self.methods_of(b, seen))
            out.update(self.methods.get(name, {}))
        return out

    def _receiver_class(self, call: cst.Call, recv: cst.BaseExpression) -> Optional[cst.BaseExpression]:
        if isinstance(recv, cst.Call):
            return recv.func
        if not isinstance(recv, cst.Name):
            return None
        g = self.index.enclosing_function(call)
        if g is None:
            return None
        if recv.value == "self":
            for a in self.index.ancestors(g):
                if isinstance(a, cst.ClassDef):
                    return cst.Name(a.name.value) if a.name.value in self.bases else None
            return None
        found: Optional[cst.BaseExpression] = None
        for n in iter_nodes(g):
            if isinstance(n, cst.Param) and n.name.value == recv.value:
                return None
            if isinstance(n, (cst.AugAssign, cst.AnnAssign, cst.For, cst.WithItem, cst.NamedExpr)) and \
                    _binds(n, recv.value):
                return None
            if isinstance(n, cst.Assign) and any(_binds(t, recv.value) for t in n.targets):
                if len(n.targets) != 1 or not isinstance(n.targets[0].target, cst.Name) or \
                        not isinstance(n.value, cst.Call) or found is not None and \
                        dotted_name(found) != dotted_name(n.value.func):
                    return None
                found = n.value.func
        return found

    def target(self, call: cst.Call) -> Optional[Tuple[str, Required, bool]]:
        """(what is called, its scaler parameter, whether bound to an instance) for a call of a
        function or method with a required scaler parameter, else None."""
        fn = call.func
        quals = self.table.qualified_names(fn)
        for q in sorted(quals):
            req = self.far_func(q)
            if req is not None:
                return q.rpartition(".")[2], req, False
        if isinstance(fn, cst.Name) and not quals and fn.value in self.funcs:
            return fn.value, self.funcs[fn.value], False
        if isinstance(fn, cst.Attribute):
            cls = self._receiver_class(call, fn.value)
            if cls is not None:
                req = self.methods_of(cls).get(fn.attr.value)
                if req is not None:
                    return f"{dotted_name(cls)}.{fn.attr.value}", req, True
        return None


class _FarDefinitions:
    """The functions and methods with a required scaler parameter that the run's modules published
    (`RepoFacts.scaler_required`), found by qualified name: a file looks up only the names its calls
    spell, not every module's definitions. A function the amp codemod changes (`scaler_functions`)
    is left to it (it reports the calls of the functions it changes); a module's own definitions
    (`key`) are not looked up here. Made once per facts object (a run's pass-2 files share one)."""

    _last: Optional[Tuple[RepoFacts, int, int, "_FarDefinitions"]] = None

    def __init__(self, facts: RepoFacts):
        self.facts = facts
        self.required: Dict[str, List[Tuple[int, str]]] = {}  # module -> (place in the facts, key)
        for pos, key in enumerate(facts.scaler_required):
            self.required.setdefault(key.rpartition("::")[2], []).append((pos, key))
        self.changed: Dict[str, List[str]] = {}  # module -> keys of scaler_functions
        for key in facts.scaler_functions:
            self.changed.setdefault(key.rpartition("::")[2], []).append(key)
        # the keys that define something to look up (a method, or a function the amp codemod leaves)
        self.defining = [key for key, req in facts.scaler_required.items() if any(
            name.rpartition(".")[0] or not self._skipped(f"{key.rpartition('::')[2]}.{name}") for name in req)]

    @classmethod
    def of(cls, facts: RepoFacts) -> "_FarDefinitions":
        last = cls._last
        if last is not None and last[0] is facts and last[1] == len(facts.scaler_required) \
                and last[2] == len(facts.scaler_functions):
            return last[3]
        found = cls(facts)
        cls._last = (facts, len(facts.scaler_required), len(facts.scaler_functions), found)
        return found

    def _skipped(self, dotted: str) -> bool:
        """Whether `dotted` is `module.function` of a function in `scaler_functions`."""
        at = dotted.find(".")
        while at >= 0:
            head, tail = dotted[:at], dotted[at + 1:]
            if any(tail in self.facts.scaler_functions[k] for k in self.changed.get(head, ())):
                return True
            at = dotted.find(".", at + 1)
        return False

    def any_besides(self, key: str) -> bool:
        """Whether a module other than `key` defines something to look up."""
        return any(k != key for k in self.defining[:2])

    def func(self, q: str, own: str) -> Optional[Required]:
        mod, dot, name = q.rpartition(".")
        if not dot or self._skipped(q):
            return None
        found: Optional[Required] = None
        for _, key in self.required.get(mod, ()):
            req = self.facts.scaler_required[key]
            if key != own and name in req:
                found = tuple(req[name])  # type: ignore[assignment]  # the last module of that name wins
        return found

    def methods(self, q: str, own: str) -> Dict[str, Required]:
        hits: List[Tuple[int, str]] = []
        at = q.find(".")
        while at >= 0:
            hits.extend((pos, key) for pos, key in self.required.get(q[:at], ()) if key != own)
            at = q.find(".", at + 1)
        out: Dict[str, Required] = {}
        for _, key in sorted(hits):
            mod = key.rpartition("::")[2]
            for name, value in self.facts.scaler_required[key].items():
                c, _, meth = name.rpartition(".")
                if c and f"{mod}.{c}" == q:
                    out[meth] = tuple(value)  # type: ignore[assignment]
        return out


def _binds(node: cst.CSTNode, name: str) -> bool:
    target = getattr(node, "target", None) or getattr(node, "asname", None) or node
    return any(isinstance(x, cst.Name) and x.value == name for x in iter_nodes(target))  # type: ignore[arg-type]


class MissingScalerArgumentLint(Codemod):
    """Calls that omit a required GradScaler parameter (A2A701, findings only)."""

    NAME = "scaler_calls"
    DESCRIPTION = "native AMP lint: calls that omit a required GradScaler parameter"
    CODES = (MISSING_SCALER.code,)
    TOKENS = (b"scaler", b"Scaler")
    REPORTS_ONLY = True
    PUBLISHES_FACTS = True  # each module's functions with a required scaler parameter

    def transform(self, wrapper: cst.MetadataWrapper, ctx: FileContext) -> cst.Module:
        mod = _Module(wrapper.module, ctx)
        published = mod.published()
        if published and ctx.module_name:
            ctx.exported.scaler_required.setdefault(mod.key, {}).update(published)
        if not (published or mod.far.any_besides(mod.key)):
            return wrapper.module
        for call in mod.index.calls:
            hit = mod.target(call)
            if hit is None or _passes(call, hit[1], hit[2]) or ctx.suppressed(call, MISSING_SCALER.code):
                continue
            name, (param, _), _ = hit
            spelled = wrapper.module.code_for_node(call.func)
            ctx.report(call, MISSING_SCALER.code, f"`{spelled}(...)` omits `{param}`, a required parameter of "
                                                  f"`{name}`: pass the GradScaler (`{param}={param}`) or give "
                                                  "the function another way to reach it")
        return wrapper.module
