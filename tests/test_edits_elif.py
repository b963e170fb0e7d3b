"""An `elif` that a plan replaces by statements: libcst accepts only an `if` or an `else` in an `if`'s
`orelse`, so the replacement becomes another `elif`, an `else:` holding the statements, or nothing
(a fuzzed fixture crashed the amp codemod with a FlattenSentinel there)."""
import libcst as cst
import pytest

from codemods.edits import EditPlan, apply_plan
from codemods.names import parse_stmt

SRC = "if a:\n    x = 1\nelif b:\n    y = 2\nelse:\n    z = 3\nprint(x)\n"


@pytest.mark.parametrize("replacement,expected", [
    (["w = 4\n"], "if a:\n    x = 1\nelse:\n    w = 4\nprint(x)\n"),
    (["w = 4\n", "v = 5\n"], "if a:\n    x = 1\nelse:\n    w = 4\n    v = 5\nprint(x)\n"),
    (["if c:\n    y = 2\n"], "if a:\n    x = 1\nelif c:\n    y = 2\nprint(x)\n"),
    ([], "if a:\n    x = 1\nprint(x)\n"),
])
def test_an_elif_replaced_by_statements(replacement, expected):
    module = cst.parse_module(SRC)
    top = module.body[0]
    plan = EditPlan()
    plan.replace_stmt[top.orelse] = [parse_stmt(s) for s in replacement]
    out = apply_plan(module, plan).code
    assert out == expected
    compile(out, "<test>", "exec")
