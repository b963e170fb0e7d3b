"""The light walks (codemods/walk.py) answer what libcst visitors answer, on every fixture.

The reference visitors below are the straightforward libcst versions the light walks replaced.
"""
from __future__ import annotations

import glob
import os
from typing import Set

import libcst as cst
import pytest

from codemods.names import assigned_names, dotted_name, names_read
from codemods.walk import iter_nodes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _names_read_visitor(node: cst.CSTNode) -> Set[str]:
    out: Set[str] = set()

    class V(cst.CSTVisitor):
        def visit_Attribute(self, n: cst.Attribute) -> bool:
            n.value.visit(self)
            return False

        def visit_Name(self, n: cst.Name) -> None:
            out.add(n.value)

        def visit_Import(self, n: cst.Import) -> bool:
            return False

        def visit_ImportFrom(self, n: cst.ImportFrom) -> bool:
            return False

        def visit_Arg(self, n: cst.Arg) -> bool:
            n.value.visit(self)
            return False

        def visit_Param(self, n: cst.Param) -> bool:
            if n.default is not None:
                n.default.visit(self)
            if n.annotation is not None:
                n.annotation.visit(self)
            return False

    node.visit(V())
    return out


def _assigned_names_visitor(stmt: cst.CSTNode) -> Set[str]:
    out: Set[str] = set()

    def add_target(t: cst.BaseExpression) -> None:
        if isinstance(t, (cst.Tuple, cst.List)):
            for el in t.elements:
                add_target(el.value)
        elif isinstance(t, cst.StarredElement):
            add_target(t.value)
        else:
            d = dotted_name(t)
            if d:
                out.add(d)
            elif isinstance(t, cst.Subscript):
                d = dotted_name(t.value)
                if d:
                    out.add(d)

    class V(cst.CSTVisitor):
        def visit_Assign(self, n: cst.Assign) -> None:
            for t in n.targets:
                add_target(t.target)

        def visit_AnnAssign(self, n: cst.AnnAssign) -> None:
            add_target(n.target)

        def visit_AugAssign(self, n: cst.AugAssign) -> None:
            add_target(n.target)

        def visit_AsName(self, n: cst.AsName) -> None:
            add_target(n.name)  # type: ignore[arg-type]

        def visit_For(self, n: cst.For) -> None:
            add_target(n.target)

        def visit_NamedExpr(self, n: cst.NamedExpr) -> None:
            add_target(n.target)

        def visit_FunctionDef(self, n: cst.FunctionDef) -> bool:
            out.add(n.name.value)
            return False

        def visit_ClassDef(self, n: cst.ClassDef) -> bool:
            out.add(n.name.value)
            return False

        def visit_Lambda(self, n: cst.Lambda) -> bool:
            return False

    stmt.visit(V())
    return out


def _modules():
    for p in sorted(glob.glob(os.path.join(ROOT, "fixtures", "**", "*.py"), recursive=True)):
        try:
            yield os.path.relpath(p, ROOT), cst.parse_module(open(p, "rb").read())
        except Exception:
            continue


@pytest.mark.parametrize("name,module", list(_modules()), ids=lambda v: v if isinstance(v, str) else "")
def test_light_walks_match_visitors(name, module):
    for node in iter_nodes(module):
        if isinstance(node, (cst.BaseStatement, cst.BaseSmallStatement, cst.BaseExpression)):
            assert names_read(node) == _names_read_visitor(node), module.code_for_node(node)[:60]
            assert assigned_names(node) == _assigned_names_visitor(node), module.code_for_node(node)[:60]


def test_iter_nodes_reaches_every_syntax_node():
    module = cst.parse_module("@d(x)\ndef f(a: int = g(1), *b, **c) -> T:\n    return [y for y in z if y] or (p if q else r)\n")
    seen = {type(n).__name__ for n in iter_nodes(module)}
    assert {"Decorator", "Param", "Annotation", "ListComp", "CompFor", "CompIf", "IfExp", "BooleanOperation"} <= seen
    names = [n.value for n in iter_nodes(module) if isinstance(n, cst.Name)]
    assert sorted(names) == sorted(["d", "x", "f", "a", "int", "g", "b", "c", "T", "y", "y", "z", "y", "p", "q", "r"])


def test_visitors_without_field_hooks_define_none():
    """`walk.Visitor` and `walk.Transformer` skip libcst's per-field hooks: a subclass that defined
    one (`visit_Call_func`) would silently never run."""
    import inspect
    import re

    import codemods
    from codemods import walk
    field_hook = re.compile(r"^(visit|leave)_[A-Z][A-Za-z]*_[a-z_]+$")
    pkg = os.path.dirname(codemods.__file__)
    for path in sorted(glob.glob(os.path.join(pkg, "*.py"))):
        source = open(path, encoding="utf-8").read()
        for match in re.finditer(r"def ((?:visit|leave)_\w+)\(", source):
            assert not field_hook.match(match.group(1)), (path, match.group(1))
    assert issubclass(walk.Visitor, cst.CSTVisitor) and issubclass(walk.Transformer, cst.CSTTransformer)
    assert inspect.getattr_static(walk.Visitor, "on_visit_attribute") is \
        inspect.getattr_static(walk.Transformer, "on_visit_attribute")


def test_children_reads_every_sequence_field():
    """A field holding a list or tuple, or a subclass of either, is a sequence of children."""
    from codemods.walk import children

    class Body(list):
        pass

    module = cst.parse_module("a()\nb()\n")
    for body in (list(module.body), tuple(module.body), Body(module.body)):
        assert children(module.with_changes(body=body)) == list(module.body)
