"""`apply_plan` walks only the paths to the planned nodes (`_Apply.rebuild`): it must give what
libcst's own visit of the whole tree gives with the same leave hooks, on every fixture, for plans
that remove, replace, wrap and insert around statements and replace expressions."""
from __future__ import annotations

import glob
import os
import random

import libcst as cst
import pytest

from codemods import edits
from codemods.edits import EditPlan
from codemods.index import ModuleIndex
from codemods.walk import iter_nodes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _LibcstVisit(cst.CSTTransformer):
    """The reference: libcst's visit, entering only the planned paths, with `_Apply`'s leave hooks."""

    def __init__(self, apply: "edits._Apply"):
        super().__init__()
        self.apply = apply

    def on_visit(self, node: cst.CSTNode) -> bool:
        return id(node) in self.apply.needed

    def on_leave(self, original_node, updated_node):
        if updated_node is original_node and id(original_node) not in self.apply.needed:
            return original_node
        return self.apply.on_leave(original_node, updated_node)


def _plans(module: cst.Module, rng: random.Random):
    index = ModuleIndex.of(module)
    stmts = [n for n in index.nodes if isinstance(n, (cst.BaseStatement, cst.BaseSmallStatement))]
    exprs = [n for n in iter_nodes(module) if isinstance(n, (cst.Call, cst.Name, cst.Attribute))]
    blocks = [n for n in index.nodes if isinstance(n, cst.IndentedBlock)] + [module]
    for _ in range(6):
        plan = EditPlan()
        for stmt in rng.sample(stmts, min(len(stmts), rng.randint(1, 3))):
            what = rng.choice(("remove", "replace", "before", "after"))
            new = cst.parse_statement("marker()\n")
            if what == "remove":
                plan.remove(stmt)
            elif what == "replace" and isinstance(stmt, cst.BaseStatement):
                plan.replace_stmt[stmt] = [new, cst.parse_statement("other = 1\n")]
            elif isinstance(stmt, cst.BaseStatement):
                (plan.insert_before if what == "before" else plan.insert_after)(stmt, [new])
        for expr in rng.sample(exprs, min(len(exprs), rng.randint(0, 2))):
            if not plan.touched() or all(not index.contains(t, expr) and not index.contains(expr, t)
                                         for t in plan.touched()):
                plan.replace_node[expr] = cst.Name("replaced")
        block = rng.choice(blocks)
        if len(block.body) >= 2 and rng.random() < 0.3 and not any(s in plan.replace_stmt for s in block.body):
            plan.wrap(block.body[0], block.body[-1], lambda inner: cst.With(
                items=[cst.WithItem(cst.Name("ctx"))], body=cst.IndentedBlock(body=inner)))
        yield plan
    for node in index.nodes:  # every `elif` removed, and replaced by an empty line (which libcst drops)
        if isinstance(node, cst.If) and isinstance(node.orelse, cst.If):
            plan = EditPlan()
            plan.remove(node.orelse)
            yield plan
    # any node removed (optional fields become None, sentinel ones MaybeSentinel.DEFAULT, required ones
    # raise), replaced by a sequence (raises outside a sequence) or by what is not a node (raises)
    others = [n for n in index.nodes if n is not module]
    for node in rng.sample(others, min(len(others), 12)):
        for replacement in (cst.RemovalSentinel.REMOVE, cst.FlattenSentinel([cst.Name("a"), cst.Name("b")]), None):
            plan = EditPlan()
            plan.replace_node[node] = replacement
            yield plan
    lines = [n for n in stmts if isinstance(n, cst.BaseStatement)]
    if lines:
        plan = EditPlan()
        plan.replace_stmt[rng.choice(lines)] = [cst.SimpleStatementLine(body=[])]
        yield plan


def _modules():
    for p in sorted(glob.glob(os.path.join(ROOT, "fixtures", "*", "*.before.py"))):
        try:
            yield os.path.relpath(p, ROOT), cst.parse_module(open(p, "rb").read())
        except Exception:
            continue


@pytest.mark.parametrize("name,module", list(_modules()), ids=lambda v: v if isinstance(v, str) else "")
def test_path_rebuild_equals_libcsts_visit(name, module):
    rng = random.Random(name)
    for plan in _plans(module, rng):
        try:
            expected = module.visit(_LibcstVisit(edits._applier(module, plan))).code
        except Exception as e:  # a plan libcst cannot apply must fail the same way
            with pytest.raises(type(e)):
                edits.apply_plan(module, plan).code
            continue
        assert edits.apply_plan(module, plan).code == expected
