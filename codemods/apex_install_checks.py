"""apex install checks: test-skip conditions on an apex flag (kept: the code under test may need
apex), bare `import apex` probes beside another library's imports, `if not has_apex: raise` checks
kept while another module keeps its apex amp code, and `try: <imports> except ImportError: raise
ImportError("install apex")` guards around imports that became torch's (unwrapped)."""
from __future__ import annotations

from typing import Dict, List, Optional, Set

import libcst as cst

from . import amp_rules as R
from .apex_uses import is_guard_stmt
from .base import FileContext
from .edits import EditPlan, apply_plan
from .guards import imported_packages, imports_from_apex
from .index import ModuleIndex
from .names import ImportTable, dotted_name, names_read
from .walk import Visitor

SKIP_MARKERS = {"skipif", "skipIf", "skipUnless", "skip_if", "skip_unless"}
SKIP_CALLS = {"skip", "skipTest"}


def skip_gate(index: ModuleIndex, flags: Set[str]) -> Optional[cst.CSTNode]:
    """The first test-skip condition that reads one of `flags`: `pytest.mark.skipif(not HAS_APEX, ...)`,
    `unittest.skipUnless(HAS_APEX, ...)`, or an `if` on the flag whose body calls `pytest.skip(...)` /
    `self.skipTest(...)`. An apex flag there says whether apex is installed for the code under test,
    which may live in another package: folding it to True would run tests that still need apex."""
    for name in index.names:
        if name.value not in flags:
            continue
        for node in index.ancestors(name):
            if isinstance(node, cst.Call) and _callee(node) in SKIP_MARKERS:
                return node
            if isinstance(node, cst.If) and index.contains(node.test, name) and any(
                    _callee(c) in SKIP_CALLS for c in index.calls_in(node.body)):
                return node
    return None


def _callee(call: cst.Call) -> str:
    func = call.func
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return func.value if isinstance(func, cst.Name) else ""


def apex_probes(module: cst.Module, table: ImportTable) -> Dict[str, cst.CSTNode]:
    """A bare `import apex`, read nowhere, in a `try` that also imports another library (not torch):
    `import apex` above `from megatron.core.fusions.fused_layer_norm import FusedLayerNorm` checks
    that apex is there for the code beside it. Name -> its import statement."""
    out: Dict[str, cst.CSTNode] = {}
    index = ModuleIndex.of(module)
    for t in index.tries:
        body = t.body.body if isinstance(t.body, cst.IndentedBlock) else []
        smalls = [small for s in body if isinstance(s, cst.SimpleStatementLine) for small in s.body
                  if isinstance(small, (cst.Import, cst.ImportFrom))]
        probes = [small for small in smalls if isinstance(small, cst.Import) and
                  any(dotted_name(a.name) == "apex" and a.asname is None for a in small.names)]
        others = [small for small in smalls if not imports_from_apex(small) and imported_packages(small) - {"torch"}]
        if probes and others and not index.reads("apex"):
            out["apex"] = probes[0]
    return out


def _mentions_apex(node: cst.CSTNode) -> bool:
    found = False

    class V(Visitor):
        def visit_SimpleString(self, n: cst.SimpleString) -> None:
            nonlocal found
            if "apex" in n.value.lower():
                found = True

    node.visit(V())
    return found


def module_keeping_apex(ctx: FileContext) -> Optional[str]:
    """Another module of the run whose apex amp code stays (pass 1's `unmigrated_amp`), if any."""
    return next((m for m in ctx.facts.unmigrated_amp if m != ctx.module_name), None)


def install_checks(module: cst.Module, guard_names: Set[str]) -> List[cst.CSTNode]:
    """`if <test reading an apex flag or name>: raise/print/warn ...` and asserts of them, in source order."""
    found: List[cst.CSTNode] = []

    class V(Visitor):
        def visit_If(self, n: cst.If) -> None:
            if n.orelse is None and names_read(n.test) & guard_names and \
                    is_guard_stmt(n, names_read(n.test) | {"None"}):
                found.append(n)

        def visit_Assert(self, n: cst.Assert) -> None:
            if names_read(n.test) & guard_names:
                found.append(n)

    module.visit(V())
    return found


def install_guard_candidates(module: cst.Module) -> bool:
    """Whether `module` has a `try` whose ImportError handler mentions apex (cheap, from the index)."""
    from .index import ModuleIndex

    for t in ModuleIndex.of(module).tries:
        for h in t.handlers:
            if h.type is not None and (dotted_name(h.type) or "") in ("ImportError", "ModuleNotFoundError") \
                    and _mentions_apex(h):
                return True
    return False


def unwrap_install_guards(module: cst.Module, ctx: FileContext, report: bool = True) -> cst.Module:
    """`try: <imports> except ImportError: raise ImportError("install apex")` -> the imports alone.

    Left behind when an apex import inside the guard was replaced by its torch equivalent.
    """
    if not install_guard_candidates(module):
        return module
    plan = EditPlan()

    class V(Visitor):
        def visit_Try(self, n: cst.Try) -> None:
            body = n.body.body if isinstance(n.body, cst.IndentedBlock) else []
            if not body or n.orelse or n.finalbody or len(n.handlers) != 1:
                return
            if not all(isinstance(s, cst.SimpleStatementLine) and all(
                    isinstance(x, (cst.Import, cst.ImportFrom)) for x in s.body) for s in body):
                return
            h = n.handlers[0]
            if h.type is None or (dotted_name(h.type) or "") not in ("ImportError", "ModuleNotFoundError"):
                return
            hbody = h.body.body if isinstance(h.body, cst.IndentedBlock) else []
            if not hbody or not all(isinstance(s, cst.SimpleStatementLine) and all(
                    isinstance(x, (cst.Raise, cst.Expr)) for x in s.body) for s in hbody):
                return
            if not _mentions_apex(h):
                return
            plan.replace_stmt[n] = list(body)
            if report:
                ctx.report(n, R.APEX_IMPORT.code, "`install apex` guard around a torch import removed", fixed=True)

    module.visit(V())
    return apply_plan(module, plan) if plan else module
