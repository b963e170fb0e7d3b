"""The state one file's fsdp2 migration plans over: the module, its parents and import table, the
planned replacements (by node id) and the findings to report once the rewrite is made; the tree
queries every planning step uses; and the transformer that applies the plan at once.

Each planning step (codemods/fsdp2_*.py) extends this state; codemods/fsdp2.py runs them.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Set, Tuple, Union

import libcst as cst

from .base import FileContext
from .names import ImportTable, names_read

DDP_NAMES = ("torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.distributed.DistributedDataParallel",
             "torch.nn.DistributedDataParallel")
# DDP options with no FSDP2 meaning (FSDP2 has no buckets and no unused-parameter search)

Block = Union[cst.Module, cst.IndentedBlock]


class Refuse(Exception):
    """The site cannot be migrated: (node, code, message) for the finding."""

    def __init__(self, node: Optional[cst.CSTNode], code: str, message: str):
        super().__init__(message)
        self.node, self.code, self.message = node, code, message


class _Parents(cst.CSTVisitor):
    """Parent of every node, and the statement blocks."""

    def __init__(self) -> None:
        self.parent: Dict[int, cst.CSTNode] = {}
        self.stack: List[cst.CSTNode] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.stack:
            self.parent[id(node)] = self.stack[-1]
        self.stack.append(node)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self.stack.pop()


def all_nodes(root: cst.CSTNode, kind: type) -> List[cst.CSTNode]:
    out: List[cst.CSTNode] = []

    class V(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            if isinstance(node, kind):
                out.append(node)
            return True

    root.visit(V())
    return out


class Fsdp2State:
    """One file's fsdp2 migration, planned on the original tree, then applied at once."""

    def __init__(self, module: cst.Module, ctx: FileContext):
        self.module, self.ctx = module, ctx
        self.table = ImportTable.of(module, ctx.module_name)
        p = _Parents()
        module.visit(p)
        self.parent = p.parent
        self.replace: Dict[int, Union[cst.CSTNode, cst.FlattenSentinel, cst.RemovalSentinel]] = {}
        self.fixed: List[Tuple[cst.CSTNode, str, str]] = []
        self.later: List[Tuple[cst.CSTNode, str, str]] = []  # warnings reported when the rewrite is made
        self.needs_dcp: Set[str] = set()
        self.notes: List[str] = []  # added to the A2A801 message
        self.covered: Set[int] = set()  # `.module` attributes inside a rewritten checkpoint call

    # -- finding things --------------------------------------------------------------------------

    def _refers(self, node: cst.BaseExpression, names: Sequence[str]) -> bool:
        return self.table.refers_to(node, *names)

    def _calls_to(self, names: Sequence[str]) -> List[cst.Call]:
        return [c for c in all_nodes(self.module, cst.Call) if self._refers(c.func, names)]  # type: ignore

    def _under(self, node: cst.BaseExpression, prefix: str) -> bool:
        return self.table.refers_under(node, prefix)

    def _enclosing(self, node: cst.CSTNode, kind: type) -> Optional[cst.CSTNode]:
        cur = self.parent.get(id(node))
        while cur is not None and not isinstance(cur, kind):
            cur = self.parent.get(id(cur))
        return cur

    def _statement_of(self, node: cst.CSTNode) -> cst.CSTNode:
        cur = node
        while not isinstance(cur, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            cur = self.parent[id(cur)]
        return cur


    def _fresh(self, scope: cst.CSTNode, base: str) -> str:
        used = names_read(scope) | {n for s in all_nodes(scope, cst.Name) for n in [s.value]}  # type: ignore
        used |= names_read(self.module)
        name, i = base, 1
        while name in used:
            i += 1
            name = f"{base}{i}"
        return name

    def _before(self, a: cst.CSTNode, b: cst.CSTNode) -> bool:
        pa, pb = self.ctx._positions.get(a), self.ctx._positions.get(b)  # noqa: SLF001
        if pa is None or pb is None:
            return False
        return (pa.start.line, pa.start.column) < (pb.start.line, pb.start.column)

    def _inside_def(self, node: cst.CSTNode, scope: cst.CSTNode) -> bool:
        """`node` sits in a function or class nested in `scope`."""
        cur = self.parent.get(id(node))
        while cur is not None and cur is not scope:
            if isinstance(cur, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                return True
            cur = self.parent.get(id(cur))
        return False

    def _inside(self, node: cst.CSTNode, outer: cst.CSTNode) -> bool:
        cur = self.parent.get(id(node))
        while cur is not None:
            if cur is outer:
                return True
            cur = self.parent.get(id(cur))
        return False


class Hoisted:
    """Marker: statements to put before a rank guard."""

    def __init__(self, lines: List[cst.CSTNode]):
        self.lines = lines


class Apply(cst.CSTTransformer):
    """Replace planned nodes (by identity of the original) with their new nodes."""

    def __init__(self, replace: Dict[int, object]):
        super().__init__()
        self.replace = replace

    def on_leave(self, original_node, updated_node):  # type: ignore[override]
        r = self.replace.get(id(original_node))
        if r is None:
            return updated_node
        if isinstance(r, Hoisted):
            first = r.lines[0].with_changes(leading_lines=updated_node.leading_lines)
            return cst.FlattenSentinel([first, *r.lines[1:], updated_node.with_changes(leading_lines=())])
        if isinstance(r, cst.FlattenSentinel):
            nodes = list(r.nodes)
            inner_ids = {id(original_node.body)} if isinstance(original_node, cst.With) else set()
            if inner_ids:  # a no_sync block: keep the body's own (already updated) statements
                nodes = [nodes[0], *updated_node.body.body, nodes[-1]]
            return cst.FlattenSentinel(nodes)
        return r
