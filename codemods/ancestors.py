"""The nearest enclosing node of some kinds, and the statement holding a node, through a parent map
(shared by the apex.parallel and launch codemods)."""
from __future__ import annotations

from typing import Optional

import libcst as cst


def enclosing(node: cst.CSTNode, parents, kinds) -> Optional[cst.CSTNode]:
    """The nearest ancestor of one of `kinds` (or None)."""
    cur = parents.get(node)
    while cur is not None and not isinstance(cur, kinds):
        cur = parents.get(cur)
    return cur


def statement_of(node: cst.CSTNode, parents) -> Optional[cst.CSTNode]:
    """The statement line (or compound statement) that holds `node`."""
    cur: Optional[cst.CSTNode] = node
    while cur is not None and not isinstance(cur, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
        cur = parents.get(cur)
    return cur
