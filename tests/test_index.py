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
def test_codegen_index_matches_visitor_and_position_provider(name, source):
    module = cst.parse_module(source)
    fast = ModuleIndex(module)
    slow = ModuleIndex(module, use_codegen=False)
    assert fast.code == module.code
    assert fast.parents.keys() == slow.parents.keys()
    assert all(fast.parents[k] is slow.parents[k] for k in fast.parents)
    for kind in LISTS:
        assert [id(n) for n in getattr(fast, kind)] == [id(n) for n in getattr(slow, kind)], kind
    assert fast.name_values == slow.name_values and fast.attr_values == slow.attr_values
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    # whitespace nodes are left out: leaves nothing asks about, two in five of a module's nodes
    expected = {node: rng for node, rng in expected.items() if type(node) is not cst.SimpleWhitespace}
    assert len(fast.positions) == len(expected)
    for node, rng in expected.items():
        assert fast.positions[node] == rng, (type(node).__name__, module.code_for_node(node)[:40])
    assert not any(type(n) is cst.SimpleWhitespace for n in fast.nodes)


def test_positions_refuse_foreign_nodes():
    module = cst.parse_module("x = 1\n")
    other = cst.parse_module("x = 1\n")
    pos = ModuleIndex(module).positions
    assert pos.get(other.body[0]) is None and other.body[0] not in pos
    assert module.body[0] in pos and pos[module.body[0]].start.line == 1


@pytest.mark.parametrize("name,source", list(_sources()), ids=lambda v: v if isinstance(v, str) and "\n" not in v else "")
def test_read_names_match_the_names_read_visitor(name, source):
    from codemods.names import names_read
    module = cst.parse_module(source)
    by_statement = set()
    for stmt in module.body:
        by_statement |= names_read(stmt)  # the visitor (names_read takes the index only for a Module)
    assert ModuleIndex(module).read_names == by_statement


@pytest.mark.parametrize("name,source", list(_sources()), ids=lambda v: v if isinstance(v, str) and "\n" not in v else "")
def test_reads_answers_like_read_names(name, source):
    module = cst.parse_module(source)
    values = {n.value for n in ModuleIndex(module).names} | {"absent_name"}
    fast = ModuleIndex(module)
    expected = ModuleIndex(module).read_names
    assert {v for v in values if fast.reads(v)} == expected & values


# -- an index derived from an earlier tree's (ModuleIndex.of(new, base=old)) -------------------------

def _assert_same_index(derived: ModuleIndex, full: ModuleIndex) -> None:
    """Everything a codemod reads from an index, compared node by node."""
    assert derived.code == full.code
    assert [id(n) for n in derived.nodes] == [id(n) for n in full.nodes]
    assert derived.parents == full.parents
    for kind in LISTS + ("attributes",):
        assert [id(n) for n in getattr(derived, kind)] == [id(n) for n in getattr(full, kind)], kind
    assert derived.name_values == full.name_values and derived.attr_values == full.attr_values
    assert len(derived.positions) == len(full.positions)
    for node in full.nodes:
        assert derived.positions.get(node) == full.positions.get(node), type(node).__name__
    assert derived.statements == full.statements
    assert derived.statement_keys == full.statement_keys and derived.statement_starts == full.statement_starts


def _replaced(index: ModuleIndex, target: cst.CSTNode, replacement: cst.CSTNode) -> cst.Module:
    """The module with `target` replaced, every node off the path to it kept (as codemods do)."""
    import dataclasses
    child, new = target, replacement
    for parent in index.ancestors(target):
        changes = {}
        for f in dataclasses.fields(parent):
            value = getattr(parent, f.name)
            if value is child:
                changes[f.name] = new
            elif isinstance(value, (list, tuple)) and any(v is child for v in value):
                changes[f.name] = [new if v is child else v for v in value]
        child, new = parent, parent.with_changes(**changes)
    return new


def _edit(module: cst.Module, kind: str):
    """One edit of a kind codemods make, or None when the module has no place for it: a call gains
    an argument, a function a parameter, statements move under a new `with` (deeper indentation),
    an `if`/`elif` test changes, a statement is inserted or removed, the deepest statement replaced."""
    index = ModuleIndex(module)
    if kind == "call":
        call = next((c for c in index.calls if isinstance(c.func, cst.Name)), None)
        return call and _replaced(index, call, call.with_changes(
            args=[*call.args, cst.Arg(cst.Name("s"), keyword=cst.Name("scaler"))]))
    if kind == "param":
        f = next(iter(index.functions), None)
        return f and _replaced(index, f.params, f.params.with_changes(
            params=[*f.params.params, cst.Param(cst.Name("scaler"), default=cst.Name("None"))]))
    if kind == "wrap":
        f = next((f for f in index.functions if isinstance(f.body, cst.IndentedBlock) and len(f.body.body) > 1), None)
        if f is None:
            return None
        block = cst.With(items=[cst.WithItem(cst.Name("ctx"))], body=cst.IndentedBlock(body=f.body.body[1:]))
        return _replaced(index, f.body, f.body.with_changes(body=[f.body.body[0], block]))
    if kind == "if":
        node = index.ifs[-1] if index.ifs else None
        return node and _replaced(index, node.test, cst.Name("flag"))
    if kind == "insert":
        return module.with_changes(body=[cst.parse_statement("import os\n"), *module.body])
    if kind == "remove":
        return module.with_changes(body=module.body[1:]) if len(module.body) > 1 else None
    deepest = max((n for n in index.nodes if isinstance(n, cst.SimpleStatementLine)),
                  key=lambda n: sum(1 for _ in index.ancestors(n)), default=None)
    return deepest and _replaced(index, deepest, cst.parse_statement("pass\n"))


DERIVED_EXTRA = {
    **EXTRA,
    "nested": "import a\n\nclass K:\n    def f(self):\n        if x:\n            g(1)\n        elif y:\n"
              "            g(2)\n        else:\n            try:\n                h()\n            except E:\n"
              "                pass\n            finally:\n                k()\n        return z\n",
    "no_newline_nested": "def f():\n    a()\n    if b:\n        c()",
}


@pytest.mark.parametrize("kind", ["call", "param", "wrap", "if", "insert", "remove", "deepest"])
def test_derived_index_equals_a_full_build(kind):
    sources = [*(s for _, s in list(_sources())[::3]), *DERIVED_EXTRA.values()]  # every stage is in the next test
    copied = 0
    for source in sources:
        old = cst.parse_module(source)
        base = ModuleIndex(old)
        new = _edit(old, kind)
        if new is None:
            continue
        derived = ModuleIndex(new, base=base)
        _assert_same_index(derived, ModuleIndex(new))
        again = _edit(new, kind)  # a derived index as the base of the next one
        if again is not None:
            _assert_same_index(ModuleIndex(again, base=derived), ModuleIndex(again))
        copied += bool(derived.positions._borrowed)
    assert copied > 20  # most edits leave statements in place to copy


def test_derived_index_of_real_codemod_stages():
    """Every codemod stage of every fixture: the index engine derives equals a full build."""
    from codemods import registry
    from codemods.base import FileContext
    from libcst.metadata import MetadataWrapper as Wrapper
    from migrate.prefilter import codemods_for
    checked = 0
    for name, source in _sources():
        module = cst.parse_module(source)
        data = source if isinstance(source, bytes) else source.encode()
        for cm in codemods_for(data, registry.CODEMODS, lambda code: True):
            ModuleIndex.forget_all()
            ModuleIndex.of(module)
            try:
                new = cm.transform(Wrapper(module, unsafe_skip_copy=True), FileContext(name, "", None, None, None))
            except Exception:
                continue
            if new is module:
                continue
            derived = ModuleIndex.of(new, base=module)
            _assert_same_index(derived, ModuleIndex(new))
            module = new
            checked += 1
    ModuleIndex.forget_all()
    assert checked > 100


@pytest.mark.parametrize("name,source", list(_sources()), ids=lambda v: v if isinstance(v, str) and "\n" not in v else "")
def test_plain_parenthesize_generates_what_libcsts_generator_does(name, source):
    """codemods/fast_codegen.py replaces libcst's `_parenthesize` generator: the code, libcst's own
    positions and the index's positions must be the ones libcst's method gives."""
    from codemods import fast_codegen
    if fast_codegen.ORIGINAL is None:
        pytest.skip("this libcst has no _parenthesize to replace")
    module = cst.parse_module(source)
    fast_codegen.uninstall()
    try:
        code = module.code
        expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    finally:
        assert fast_codegen.install()
    assert module.code == code
    got = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    assert dict(got) == dict(expected)
    index = ModuleIndex(module)
    assert index.code == code
    for node, rng in expected.items():
        if type(node) is not cst.SimpleWhitespace:
            assert index.positions[node] == rng


def test_plain_parenthesize_leaves_out_the_closing_parentheses_when_the_body_raises():
    from codemods import fast_codegen
    if fast_codegen.ORIGINAL is None:
        pytest.skip("this libcst has no _parenthesize to replace")
    from libcst._nodes.internal import CodegenState

    node = cst.parse_expression("((x))")
    for method in (fast_codegen.ORIGINAL, fast_codegen._parenthesize):
        state = CodegenState(default_indent="    ", default_newline="\n")
        with pytest.raises(RuntimeError):
            with method(node, state):
                state.add_token("x")
                raise RuntimeError("inside")
        assert "".join(state.tokens) == "((x"


def test_a_rewrite_generates_each_file_whole_once(monkeypatch):
    """Only a file's first index is a whole code generation: every later tree (a codemod's output, a
    codemod's intermediate tree) derives its index from the tree it came from."""
    from migrate import engine

    builds = []
    real = ModuleIndex.__init__

    def counting(self, module, **kwargs):
        builds.append(kwargs.get("base") is not None)
        real(self, module, **kwargs)

    monkeypatch.setattr(ModuleIndex, "__init__", counting)
    for path in sorted(glob.glob(os.path.join(ROOT, "fixtures", "*", "*.before.py"))):
        builds.clear()
        engine.rewrite_source(open(path, encoding="utf-8").read(), path=path)
        # a codemod that copies a method into another class (A2A418) builds the copy's tree anew
        whole = 2 if "backend_engines" in path else 1
        assert builds.count(False) <= whole, (os.path.relpath(path, ROOT), builds)
