"""The codegen-based ModuleIndex gives what a libcst visitor walk and PositionProvider give.

The fast index relies on libcst's codegen hooks (private API); this test fails loudly if a libcst
release changes them, instead of letting positions or parent links drift.
"""
from __future__ import annotations

import glob
import os

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from codemods.index import ModuleIndex

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LISTS = ("calls", "names", "functions", "classes", "withs", "decorators", "ifs", "tries", "strings", "imports")

EXTRA = {
    "no_trailing_newline": "import apex\nx = (1 +\n  2)",
    "crlf": "def f():\r\n    return amp.scale_loss(a, b)\r\n",
    "cr_only": "x = 1\ry = 2\r",
    "tabs_and_comments": "if x:\n\t# c\n\ty = f(a)[0]  # t\n",
    "decorated": "@a.b(c)\n\n@d\nclass K(B):\n    @property\n    def p(self): return {k: v for k, v in z}\n",
    "empty": "",
}


def _sources():
    for p in sorted(glob.glob(os.path.join(ROOT, "fixtures", "**", "*.py"), recursive=True)):
        data = open(p, "rb").read()
        try:
            cst.parse_module(data)
        except Exception:  # the deliberately broken fixtures
            continue
        yield os.path.relpath(p, ROOT), data
    for name, text in EXTRA.items():
        yield name, text


@pytest.mark.parametrize("name,source", list(_sources()), ids=lambda v: v if isinstance(v, str) and "\n" not in v else "")
def test_codegen_index_matches_visitors_and_position_provider(name, source):
    module = cst.parse_module(source)
    fast = ModuleIndex(module)
    slow = ModuleIndex(module, use_codegen=False)
    assert fast.code == module.code
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    # whitespace nodes are left out: leaves nothing asks about, two in five of a module's nodes
    expected = {node: rng for node, rng in expected.items() if type(node) is not cst.SimpleWhitespace}
    # a node is told by what it is and where its code lies (PositionProvider's range), not by the object
    where = lambda n: (type(n).__name__, _span(expected.get(n)))  # noqa: E731
    assert sorted(map(where, fast.parents)) == sorted(map(where, slow.parents))
    assert sorted((where(k), where(v)) for k, v in fast.parents.items()) == \
        sorted((where(k), where(v)) for k, v in slow.parents.items())
    for kind in LISTS:
        assert [where(n) for n in getattr(fast, kind)] == [where(n) for n in getattr(slow, kind)], kind
    assert fast.name_values == slow.name_values and fast.attr_values == slow.attr_values
    assert len(fast.positions) == len(expected)
    for node, rng in expected.items():
        assert fast.positions[node] == rng, (type(node).__name__, module.code_for_node(node)[:40])
    assert not any(type(n) is cst.SimpleWhitespace for n in fast.nodes)
    # the names the module reads: as the names_read visitor finds them statement by statement
    from codemods.names import names_read
    by_statement = set()
    for stmt in module.body:
        by_statement |= names_read(stmt)  # the visitor (names_read takes the index only for a Module)
    assert fast.read_names == by_statement
    values = {n.value for n in fast.names} | {"absent_name"}
    assert {v for v in values if ModuleIndex(module).reads(v)} == by_statement & values


def _span(rng):
    return None if rng is None else (rng.start.line, rng.start.column, rng.end.line, rng.end.column)


def test_positions_refuse_foreign_nodes():
    module = cst.parse_module("x = 1\n")
    other = cst.parse_module("x = 1\n")
    pos = ModuleIndex(module).positions
    assert pos.get(other.body[0]) is None and other.body[0] not in pos
    assert module.body[0] in pos and pos[module.body[0]].start.line == 1
