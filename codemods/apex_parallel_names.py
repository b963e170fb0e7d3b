"""The apex.parallel names (each with its torch class and the rule whose edit migrates it) and where
a module calls or references them: calls, dotted references, names bound by imports, and the
disable_allreduce() / enable_allreduce() toggles of apex DDP."""
from __future__ import annotations

from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from .apex_parallel_reported import REPORT_ONLY
from .index import ModuleIndex
from .names import ImportTable
from .walk import Visitor

# apex qualified name -> (torch module, torch name)
CLASS_MAP: Dict[str, Tuple[str, str]] = {
    "apex.parallel.DistributedDataParallel": ("torch.nn.parallel", "DistributedDataParallel"),
    "apex.parallel.distributed.DistributedDataParallel": ("torch.nn.parallel", "DistributedDataParallel"),
    "apex.parallel.SyncBatchNorm": ("torch.nn", "SyncBatchNorm"),
    "apex.parallel.optimized_sync_batchnorm.SyncBatchNorm": ("torch.nn", "SyncBatchNorm"),
    "apex.parallel.sync_batchnorm.SyncBatchNorm": ("torch.nn", "SyncBatchNorm"),
    "apex.parallel.ReduceOp": ("torch.distributed", "ReduceOp"),
}
DDP_NAMES = {"apex.parallel.DistributedDataParallel", "apex.parallel.distributed.DistributedDataParallel"}
SYNCBN_NAMES = {"apex.parallel.SyncBatchNorm", "apex.parallel.optimized_sync_batchnorm.SyncBatchNorm",
                "apex.parallel.sync_batchnorm.SyncBatchNorm"}
CONVERT_NAMES = {"apex.parallel.convert_syncbn_model"}
GROUP_NAMES = {"apex.parallel.create_syncbn_process_group"}


def edit_code(q: str) -> str:
    """The rule whose edit migrates the apex.parallel name `q` (a report-only name: its finding's rule)."""
    if q in DDP_NAMES or any(q.startswith(d + ".") for d in DDP_NAMES):
        return "A2A201"
    if q in SYNCBN_NAMES or any(q.startswith(n + ".") for n in SYNCBN_NAMES):
        return "A2A210"
    if q in CONVERT_NAMES:
        return "A2A211"
    if q in GROUP_NAMES:
        return "A2A213"
    if q.startswith("apex.parallel.ReduceOp"):
        return "A2A222"
    if q in ("apex.parallel.LARC.LARC", "apex.parallel.LARC"):
        return "A2A225"
    return REPORT_ONLY.get(q, "A2A202")


class Refs(Visitor):
    """Every call to, and every reference of, an apex.parallel name."""

    def __init__(self, table: ImportTable):
        self.table = table
        self.calls: List[Tuple[cst.Call, str]] = []
        self.attr_refs: List[Tuple[cst.Attribute, str]] = []  # non-call dotted references (apex.parallel.X)
        self.name_refs: Dict[str, List[cst.Name]] = {}
        self.toggles: List[cst.Call] = []

    def _q(self, node: cst.BaseExpression) -> Optional[str]:
        qs = [q for q in self.table.qualified_names(node) if q.startswith("apex.parallel")]
        return qs[0] if qs else None

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def visit_Call(self, node: cst.Call) -> None:
        q = self._q(node.func)
        if q:
            self.calls.append((node, q))
        if isinstance(node.func, cst.Attribute) and node.func.attr.value in ("disable_allreduce", "enable_allreduce"):
            self.toggles.append(node)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        q = self._q(node)
        if q:
            self.attr_refs.append((node, q))
            return False
        return True

    def visit_Name(self, node: cst.Name) -> None:
        if node.value in self.table.bindings:
            self.name_refs.setdefault(node.value, []).append(node)

    @classmethod
    def of(cls, table: ImportTable, index: ModuleIndex) -> "Refs":
        """What `module.visit(Refs(table))` finds, in the same order, from the shared index.

        Calls are never inside imports or dotted names, so every call is seen. A dotted reference can
        only resolve when its head name is bound by an import, so only chains headed by such a name
        are examined: from the outermost Attribute down, the first that resolves under apex.parallel
        is recorded and the names below it are skipped, as the visitor's pruning does."""
        refs = cls(table)
        for call in index.calls:
            refs.visit_Call(call)
        bindings = table.bindings
        parents = index.parents
        skipped: Set[int] = set()
        for name in index.names:
            if name.value not in bindings or id(name) in skipped or _in_import(name, parents):
                continue
            chain: List[cst.CSTNode] = [name]
            up = parents.get(id(name))
            while isinstance(up, cst.Attribute) and up.value is chain[-1]:
                chain.append(up)
                up = parents.get(id(up))
            for j in range(len(chain) - 1, 0, -1):
                q = refs._q(chain[j])  # type: ignore[arg-type]
                if q:
                    refs.attr_refs.append((chain[j], q))  # type: ignore[arg-type]
                    skipped.update(id(a.attr) for a in chain[1:j + 1])  # type: ignore[attr-defined]
                    skipped.add(id(name))
                    break
            if id(name) not in skipped:
                refs.visit_Name(name)
        return refs


def _in_import(node: cst.CSTNode, parents: Dict[int, cst.CSTNode]) -> bool:
    """Whether `node` lies inside an import statement (walking up to its statement)."""
    cur = parents.get(id(node))
    while cur is not None and not isinstance(cur, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
        cur = parents.get(id(cur))
    return isinstance(cur, (cst.Import, cst.ImportFrom))
