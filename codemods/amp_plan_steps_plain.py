"""The fp32 branch beside an amp branch: `if params.amp == -1: loss.backward(); clip(...); opt.step()
else: with amp.scale_loss(...): ...; opt.step()`. The plain branch's own backward produced unscaled
gradients, so its clip and step stay as they are: neither is an amp step nor reads scaled gradients.

A statement is in such a branch when, walking up from it to its function, some `if` has it in one branch
and:
- the opposite branch holds an `amp.scale_loss` of this module, and this branch holds no apex amp call;
- this branch runs a plain `<x>.backward()` as one of its own statements (not under a nested `if`, loop or
  `with`), before the statement that holds the node;
- the test is a mode switch: names, attributes and constants under comparisons, `and` / `or` / `not`, no
  call or subscript; no attribute it reads (`params.amp`) is assigned anywhere in the module and no bare
  name it reads is assigned in a loop of the function. So every iteration takes the same branch, and no
  scaled gradient of the amp branch is left for the plain step to read.
"""
from __future__ import annotations

from typing import List, Optional, Set

import libcst as cst

from .walk import iter_nodes


def plain_branch(st, node: cst.CSTNode) -> Optional[cst.CSTNode]:
    """The plain-backward branch (an `IndentedBlock`) holding `node`, or None (see the module doc)."""
    index = st.index
    prev: cst.CSTNode = node
    for anc in index.ancestors(node):
        if isinstance(anc, (cst.FunctionDef, cst.ClassDef, cst.Lambda, cst.Module)):
            return None
        if isinstance(anc, cst.If) and prev is not anc.test:
            mine = prev if prev is anc.body else None
            other: Optional[cst.CSTNode] = None
            if mine is not None:
                other = anc.orelse
            elif isinstance(anc.orelse, cst.Else) and prev is anc.orelse:
                mine, other = anc.orelse.body, anc.body
            if mine is not None and other is not None and _qualifies(st, anc, mine, other, node):
                return mine
        prev = anc
    return None


def _qualifies(st, top: cst.If, mine: cst.CSTNode, other: cst.CSTNode, node: cst.CSTNode) -> bool:
    index = st.index
    if not isinstance(mine, cst.IndentedBlock):
        return False
    if any(index.contains(mine, s.call) for s in st.sites):
        return False
    if not any(s.kind == "scale_loss" and index.contains(other, s.call) for s in st.sites):
        return False
    holder = next((s for s in mine.body if index.contains(s, node)), None)
    if holder is None:
        return False
    before = list(mine.body[:list(mine.body).index(holder)])
    if not any(_plain_backward(s) for s in before):
        return False
    return _mode_test(st, top)


def _plain_backward(stmt: cst.CSTNode) -> bool:
    """`x.backward()` (or `x.backward(retain_graph=...)`) as a whole simple statement."""
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    for small in stmt.body:
        if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
            f = small.value.func
            if isinstance(f, cst.Attribute) and f.attr.value == "backward" and \
                    all(a.keyword is not None for a in small.value.args):
                return True
    return False


def _mode_test(st, top: cst.If) -> bool:
    chain: List[cst.If] = []
    cur: cst.CSTNode = top
    while isinstance(cur, cst.If):
        chain.append(cur)
        cur = cur.orelse
    attrs: Set[str] = set()
    names: Set[str] = set()
    for t in chain:
        for n in iter_nodes(t.test):
            if isinstance(n, (cst.Call, cst.Subscript, cst.Lambda, cst.NamedExpr, cst.Await, cst.Yield)):
                return False
            if isinstance(n, cst.Attribute):
                attrs.add(n.attr.value)
        names |= _bare_names(t.test)
    assigned_attrs = set()
    for n in st.index.nodes:
        for target in _targets(n):
            for m in iter_nodes(target):
                if isinstance(m, cst.Attribute):
                    assigned_attrs.add(m.attr.value)
    if attrs & assigned_attrs:
        return False
    func = st.func_of(top)
    if func is None:
        return not names
    for loop in (n for n in iter_nodes(func) if isinstance(n, (cst.For, cst.While))):
        for n in iter_nodes(loop):
            for target in _targets(n):
                if any(isinstance(m, cst.Name) and m.value in names for m in iter_nodes(target)):
                    return False
            if isinstance(n, cst.For) and any(isinstance(m, cst.Name) and m.value in names
                                              for m in iter_nodes(n.target)):
                return False
    return True


def _bare_names(e: cst.BaseExpression) -> Set[str]:
    """Names read as themselves (`fp16`), and the bases of attribute chains are left out."""
    out: Set[str] = set()
    if isinstance(e, cst.Name):
        if e.value not in ("True", "False", "None"):
            out.add(e.value)
    elif isinstance(e, cst.Attribute):
        return out
    elif isinstance(e, cst.Comparison):
        out |= _bare_names(e.left)
        for c in e.comparisons:
            out |= _bare_names(c.comparator)
    elif isinstance(e, cst.BooleanOperation):
        out |= _bare_names(e.left) | _bare_names(e.right)
    elif isinstance(e, cst.UnaryOperation):
        out |= _bare_names(e.expression)
    elif isinstance(e, (cst.Tuple, cst.List, cst.Set)):
        for el in e.elements:
            out |= _bare_names(el.value)
    return out


def _targets(n: cst.CSTNode) -> List[cst.CSTNode]:
    if isinstance(n, cst.Assign):
        return [t.target for t in n.targets]
    if isinstance(n, (cst.AugAssign, cst.AnnAssign)):
        return [n.target]
    if isinstance(n, cst.Del):
        return [n.target]
    return []
