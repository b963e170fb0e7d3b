"""apex.parallel.LARC -> the same class, added to the migrated file (A2A225); refused (A2A220) where
the file binds `LARC` to something else, imports it inside a `try` or reaches it another way.

apex's LARC (apex/parallel/LARC.py at 25.05) is plain PyTorch: it wraps any optimizer, and at each
`step()` absorbs the wrapped optimizer's weight decay into the gradients and multiplies them by the
layer-wise adaptive rate before calling the wrapped `step()`. The helper is a class of our own that
computes what apex's did, operation for operation, so the migrated file's numbers are apex's. Under GradScaler,
`scaler.step(optimizer)` unscales the gradients (through `optimizer.param_groups`, which LARC
forwards) before LARC's `step()` reads them, as apex amp unscaled them when `scale_loss` exited; an
overflow skips the whole step on both.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from .ancestors import statement_of
from .base import FIX, FileContext, rule
from .edits import EditPlan
from .names import ImportTable, dotted_name

LARC_CLASS = "apex.parallel.LARC.LARC"
LARC_MODULE = "apex.parallel.LARC"
HELPER_NAME = "LARC"

HELPER_CODE = '''class LARC:
    """Layer-wise adaptive rate scaling around `optimizer`, computed as apex.parallel.LARC did (added by
    apex2amp; plain PyTorch, https://arxiv.org/abs/1708.03888).

    Each step() folds the wrapped optimizer's weight decay into every gradient and scales it by
    trust_coefficient * |w| / (|g| + weight_decay * |w| + eps) (with clip=True: that rate divided by the
    group's lr, at most 1), then runs the wrapped step with weight decay off.
    """

    def __init__(self, optimizer, trust_coefficient=0.02, clip=True, eps=1e-8):
        self.optim = optimizer
        self.trust_coefficient = trust_coefficient
        self.clip = clip
        self.eps = eps

    @property
    def param_groups(self):
        return self.optim.param_groups

    @param_groups.setter
    def param_groups(self, value):
        self.optim.param_groups = value

    @property
    def state(self):
        return self.optim.state

    def state_dict(self):
        return self.optim.state_dict()

    def load_state_dict(self, state_dict):
        self.optim.load_state_dict(state_dict)

    def zero_grad(self, *args, **kwargs):
        self.optim.zero_grad(*args, **kwargs)

    def add_param_group(self, param_group):
        self.optim.add_param_group(param_group)

    def __repr__(self):
        return repr(self.optim)

    def step(self):
        decays = [group.get("weight_decay", 0) for group in self.optim.param_groups]
        with torch.no_grad():
            for group, decay in zip(self.optim.param_groups, decays):
                group["weight_decay"] = 0
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    w_norm, g_norm = torch.norm(p.data), torch.norm(p.grad.data)
                    if w_norm == 0 or g_norm == 0:
                        continue
                    rate = self.trust_coefficient * w_norm / (g_norm + w_norm * decay + self.eps)
                    if self.clip:
                        rate = min(rate / group["lr"], 1)
                    p.grad.data += decay * p.data
                    p.grad.data *= rate
        self.optim.step()
        for group, decay in zip(self.optim.param_groups, decays):
            group["weight_decay"] = decay
'''

rule("A2A225", "apex-larc-helper", "apex.parallel.LARC -> the same LARC class added to the file (plain PyTorch)",
     fixes=True, severity=FIX,
     why="""
torch has no LARC, but apex's LARC (apex/parallel/LARC.py) is plain PyTorch: a wrapper whose step()
folds the wrapped optimizer's weight decay into the gradients and multiplies them by the layer-wise
adaptive rate, then calls the wrapped step(). The tool adds a LARC class of its own that computes the same
thing operation for operation to the file, and drops the apex import, so the results are the same. GradScaler works with it: `scaler.step(optimizer)` unscales the gradients through
LARC's `param_groups` before LARC's step() reads them, as apex amp had unscaled them when `scale_loss`
exited, and an overflow skips the step on both. The file must not bind `LARC` to anything else (A2A220
then).""",
     before="""
import torch
from apex.parallel.LARC import LARC


def build(model):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    return LARC(optimizer=optimizer, trust_coefficient=0.001, clip=False)""",
     after="import torch\n\n\n" + HELPER_CODE + """

def build(model):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    return LARC(optimizer=optimizer, trust_coefficient=0.001, clip=False)""")

REFUSED = ("apex.parallel.LARC has no torch equivalent and cannot be added to this file ({why}): copy the "
           "LARC class of apex 25.05 (apex/parallel/LARC.py, plain PyTorch, BSD 3-Clause) into your project "
           "under a free name, import it here in place of apex's, or keep apex <= 25.05 for it")

def _other_binding(module: cst.Module, name: str) -> bool:
    """Whether anything but an import binds `name` in the module (def, class, parameter, assignment,
    loop, comprehension or `with` target, walrus, except name): the helper class would clash with it."""
    found = False

    class V(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            nonlocal found
            if isinstance(node, (cst.Import, cst.ImportFrom)):
                return False
            target: Optional[cst.CSTNode] = None
            if isinstance(node, (cst.ClassDef, cst.FunctionDef, cst.Param)):
                target = node.name
            elif isinstance(node, (cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.For, cst.CompFor,
                                   cst.NamedExpr)):
                target = node.target
            elif isinstance(node, cst.AsName):
                target = node.name
            if name in _names_in(target):
                found = True
            return not found

    module.visit(V())
    return found


def _names_in(node: Optional[cst.CSTNode]) -> List[str]:
    if node is None:
        return []
    if isinstance(node, cst.Name):
        return [node.value]
    if isinstance(node, (cst.Tuple, cst.List)):
        return [n for e in node.elements for n in _names_in(e.value)]
    if isinstance(node, cst.StarredElement):
        return _names_in(node.value)
    return []


def _in_try(node: cst.CSTNode, parents) -> bool:
    cur = parents.get(node)
    while cur is not None:
        if isinstance(cur, cst.Try):
            return True
        cur = parents.get(cur)
    return False


class LarcPlan:
    """What migrating the file's apex LARC takes, or why it cannot (`why`)."""

    def __init__(self, module: cst.Module, table: ImportTable, parents, refs, ctx: FileContext):
        self.why: Optional[str] = None
        self.calls: List[cst.Call] = [c for c, q in refs.calls if q == LARC_CLASS]
        self.other_calls = [c for c, q in refs.calls if q == LARC_MODULE]
        self.attrs = [a for a, q in refs.attr_refs if q == LARC_CLASS and not any(a is c.func for c in self.calls)]
        # locals bound by imports to apex's LARC class or module
        self.locals: Dict[str, str] = {}
        for local, qs in table.bindings.items():
            hit = qs & {LARC_CLASS, LARC_MODULE}
            if hit:
                self.locals[local] = sorted(hit)[0]
                if qs - hit:
                    self.why = f"`{local}` is also bound to {sorted(qs - hit)[0]}"
        self.name_refs: List[cst.Name] = []
        for local, q in self.locals.items():
            for n in refs.name_refs.get(local, []):
                if q == LARC_MODULE:
                    self.why = self.why or f"the module apex.parallel.LARC is used as `{local}`"
                self.name_refs.append(n)
        if not (self.calls or self.attrs or self.name_refs):
            self.why = self.why or "it is imported but never used"  # nothing to migrate: leave it to imports
            self.unused = True
        else:
            self.unused = False
        if self.other_calls:
            self.why = self.why or "the module apex.parallel.LARC is called"
        for local, q in self.locals.items():
            for stmt in table.statements.get(local, []):
                line = statement_of(stmt, parents)
                if not isinstance(stmt, cst.ImportFrom) or not isinstance(line, cst.SimpleStatementLine) or \
                        len(line.body) != 1:
                    self.why = self.why or "its import is not a plain `from ... import` line"
                elif _in_try(line, parents):
                    self.why = self.why or "its import sits in a `try`, whose fallback would stay"
        bound = set(table.bindings.get(HELPER_NAME, set()))
        if (bound and not bound <= {LARC_CLASS, LARC_MODULE}) or _other_binding(module, HELPER_NAME):
            self.why = self.why or f"the file binds `{HELPER_NAME}` to something else"
        nodes: List[cst.CSTNode] = [*self.calls, *self.attrs, *self.name_refs]
        if any(ctx.suppressed(n, "A2A2") for n in nodes):
            self.why = self.why or "an `# apex2amp: ignore` comment keeps it"

    def apply(self, table: ImportTable, parents, plan: EditPlan, ctx: FileContext) -> None:
        """The edits: each reference spelled `LARC`, apex's LARC imports dropped (the helper is added
        by the caller)."""
        for call in self.calls:
            if not (isinstance(call.func, cst.Name) and call.func.value == HELPER_NAME):
                plan.replace_node[call.func] = cst.Name(HELPER_NAME)
            ctx.report(call, "A2A225", "apex.parallel.LARC -> LARC, a class computing what apex's did (plain PyTorch) added to "
                       "this file: the same algorithm, and GradScaler unscales before its step()", fixed=True)
        for node in [*self.attrs, *self.name_refs]:
            if not (isinstance(node, cst.Name) and node.value == HELPER_NAME):
                plan.replace_node[node] = cst.Name(HELPER_NAME)
        by_stmt: Dict[int, Tuple[cst.ImportFrom, Set[str]]] = {}
        for local in self.locals:
            for stmt in table.statements.get(local, []):
                by_stmt.setdefault(id(stmt), (stmt, set()))[1].add(local)  # type: ignore[arg-type]
        for stmt, drop in by_stmt.values():
            line = statement_of(stmt, parents)
            keep = [a for a in stmt.names  # type: ignore[union-attr]
                    if (a.asname.name.value if a.asname else dotted_name(a.name)) not in drop]  # type: ignore
            if keep:
                keep[-1] = keep[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
                plan.replace_node[stmt] = stmt.with_changes(names=keep)
            else:
                plan.remove(line)
