"""Removed apex availability flags leave no read behind (regression: `def is_apex_available(): return
_has_apex` outlived `_has_apex` and raised NameError); flags that cannot fold keep their definition."""
import libcst as cst
import pytest
from golden import collect, run_case
from libcst.metadata import MetadataWrapper, ScopeProvider

from codemods.guards import apex_flag_tries
from codemods.names import ImportTable
from migrate.engine import Selection, rewrite_source


def _unbound_reads(text: str, names) -> list:
    """Reads of `names` that nothing in `text` binds."""
    wrapper = MetadataWrapper(cst.parse_module(text), unsafe_skip_copy=True)
    scopes = {s for s in wrapper.resolve(ScopeProvider).values() if s is not None}
    return sorted({n for s in scopes for n in names for a in s.accesses[n] if not a.referents})


def _rewrite(src: str):
    res = rewrite_source(src, path="m.py", module_name="m", select=Selection())
    assert res.error is None, res.error
    cst.parse_module(res.new_text)
    assert rewrite_source(res.new_text, path="m.py", module_name="m", select=Selection()).new_text == res.new_text
    return res


def _flags(src: str) -> set:
    module = cst.parse_module(src)
    return set(apex_flag_tries(module, ImportTable.of(module)))


FLAG_CASES = [c for c in collect() if c.after is not None and "apex" in c.before and _flags(c.before)]


@pytest.mark.parametrize("case", FLAG_CASES, ids=lambda c: c.id)
def test_no_read_of_a_removed_flag_is_left(case):
    assert _unbound_reads(run_case(case).new_text, _flags(case.before)) == []


TRY = "try:\n    from apex import amp  # noqa: F401\n    F = True\nexcept ImportError:\n    F = False\n"


@pytest.mark.parametrize("tail", [
    "del F\n",
    "F += 1\n",
    '__all__ = ["F"]\n',
    "def off():\n    global F\n    F = False\n",
    "F = F and check()\n",
])
def test_a_flag_that_cannot_fold_keeps_its_definition(tail):
    res = _rewrite(TRY + "\n\ndef use():\n    return F\n\n\n" + tail)
    assert "from apex" not in res.new_text
    assert "    F = True\n" in res.new_text and "return F\n" in res.new_text
    assert _unbound_reads(res.new_text, {"F"}) == []
    assert any(f.code == "A2A110" and "`F` kept" in f.message for f in res.findings)


def test_reads_fold_in_every_position_but_not_other_bindings_of_the_name():
    src = TRY + (
        "\n\nclass C:\n"
        "    def __init__(self, F=None):\n"
        "        self.F = F\n"
        "        print(self.F, dict(F=1))\n"
        "\n"
        "    def flags(self):\n"
        "        return [F, {F: F}, f'{F}', lambda: F, print(self.F)]\n"
    )
    res = _rewrite(src)
    assert "        self.F = F\n        print(self.F, dict(F=1))\n" in res.new_text
    assert "return [True, {True: True}, f'{True}', lambda: True, print(self.F)]" in res.new_text
    assert _unbound_reads(res.new_text, {"F"}) == []


def test_flag_set_inside_a_function_folds_in_its_closures():
    src = ("def setup():\n"
           "    try:\n        import apex  # noqa: F401\n        has_apex = True\n"
           "    except ImportError:\n        has_apex = False\n"
           "\n"
           "    def inner():\n        return has_apex\n"
           "    return inner\n"
           "\n\n"
           "def other(has_apex):\n    return has_apex\n")
    res = _rewrite(src)
    assert "    def inner():\n        return True\n" in res.new_text
    assert "def other(has_apex):\n    return has_apex\n" in res.new_text


def test_user_constants_are_not_folded():
    res = _rewrite(TRY + "\n\ndef f(x):\n    if False:\n        x = 1\n    return x if F else None\n")
    assert "    if False:\n        x = 1\n    return x\n" in res.new_text


def test_comments_above_folded_statements_survive():
    src = TRY + ("\n\ndef f(x, y):\n"
                 "    # only without apex\n"
                 "    if not F:\n        x = 1\n"
                 "    if y:\n        pass\n"
                 "    # above the elif\n"
                 "    elif not F:\n        x = 2\n"
                 "    return x\n")
    res = _rewrite(src)
    assert "def f(x, y):\n    # only without apex\n    if y:\n        pass\n" in res.new_text
    assert "# above the elif" in res.new_text


def test_a_folded_block_that_empties_gets_pass():
    res = _rewrite(TRY + "\n\ndef f():\n    # note\n    if not F:\n        print('no apex')\n")
    assert "def f():\n    # note\n    pass\n" in res.new_text


def test_comments_above_a_removed_elif_stay_before_what_follows():
    src = TRY + ("\n\ndef f(a, y):\n"
                 "    if a:\n        y = 2\n"
                 "    # above the elif\n"
                 "    elif not F:\n        y = 3\n"
                 "    # above the else\n"
                 "    else:\n        y = 4\n"
                 "    return y\n")
    res = _rewrite(src)
    assert "        y = 2\n    # above the elif\n    # above the else\n    else:\n        y = 4\n" in res.new_text


SCOPING_SHAPES = [
    TRY + "\n\ndef use():\n    return F\n",
    TRY + "\n\nclass C:\n    F = 1\n\n    def m(self):\n        return F\n",
    TRY + "\n\ndef f(F=F):\n    return F\n",
    TRY + "\n\ng = lambda F: F\nh = lambda x=F: x\n",
    TRY + "\n\nprint([F for F in range(3)], [F for x in range(3)])\n",
    TRY + "\n\nif (F := 3):\n    pass\n",
    TRY + "\n\nmatch 1:\n    case F:\n        pass\n",
    TRY + "\n\nfor F in range(2):\n    pass\nprint(F)\n",
    TRY + "\n\nwith open('x') as F:\n    pass\n",
    TRY + "\n\ntry:\n    pass\nexcept OSError as F:\n    pass\n",
    TRY + "\n\nfrom os import path as F\n",
    TRY + "\n\nimport F\n",
    TRY + "\n\ndef f():\n    F = 2\n    return F\n\n\ndef g():\n    return F\n",
    TRY + "\n\ndef f():\n    global F\n    return F\n",
    TRY + "\n\nx: 'F' = 1\ny = F\n",
    TRY + "\n\nF.attr = 1\nobj.F = F\ncall(F=F)\n",
    TRY + "\n\n(a, (F, b)) = 1, (2, 3)\n",
    TRY + "\n\ndef f(*, F):\n    return F\n",
    TRY + "\n\nclass K(base, metaclass=F):\n    x = F\n",
    TRY + "\n\nprint(f'{F}', F[0], -F, not F)\n",
    "def setup():\n" + "".join("    " + line + "\n" for line in TRY.splitlines()) + "    return F\n",
    "def setup():\n" + "".join("    " + line + "\n" for line in TRY.splitlines()) + "    return F\n\n\n"
    "def other():\n    return F\n",
]


@pytest.mark.parametrize("src", [c.before for c in FLAG_CASES] + SCOPING_SHAPES)
def test_flag_shapes_rewrite_to_code_that_parses_and_is_stable(src):
    """Flags read in every scoping shape (shadowed, rebound, read in nested scopes): the rewrite
    parses, and a second rewrite of it changes nothing and reports no error."""
    res = rewrite_source(src, path="m.py", module_name="m", select=Selection())
    assert res.error is None
    compile(res.new_text, "m.py", "exec")
    again = rewrite_source(res.new_text, path="m.py", module_name="m", select=Selection())
    assert again.error is None and again.new_text == res.new_text


def test_folding_flags_leaves_every_statement_without_one_as_it_was():
    """Folding the flags changes only the statements that read them: the others keep their text."""
    from codemods.base import FileContext
    from codemods.imports import RemoveApexImports
    src = ("import os\n\ntry:\n    from apex import amp\n    HAS_APEX = True\nexcept ImportError:\n    HAS_APEX = False\n\n\n"
           "def untouched(x):\n    return [y * 2 for y in x]\n\n\n"
           "def gated(model):\n    if HAS_APEX:\n        model = model.half()\n    return model\n")
    module = cst.parse_module(src)
    new = RemoveApexImports().transform(MetadataWrapper(module, unsafe_skip_copy=True),
                                        FileContext("m.py", "m", None, None, None))
    assert "HAS_APEX" not in new.code and "if " not in new.code
    before = {s.name.value: s for s in module.body if isinstance(s, cst.FunctionDef)}
    after = {s.name.value: s for s in new.body if isinstance(s, cst.FunctionDef)}
    code = cst.Module([]).code_for_node
    assert code(after["untouched"]) == code(before["untouched"])
    assert code(after["gated"]) != code(before["gated"])
