"""`apply_plan` keeps an edit made inside a node that another edit replaces wholesale."""
import libcst as cst

from codemods.edits import EditPlan, apply_plan


def _calls(module: cst.Module):
    found = []

    class V(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            found.append(node)

    module.visit(V())
    return found


def test_inner_replacement_survives_the_outer_one():
    module = cst.parse_module("x = outer(1, key=inner(2))  # note\n")
    outer, inner = _calls(module)
    plan = EditPlan()
    plan.replace_node[outer] = outer.with_changes(func=cst.Name("new_outer"))  # built from the original args
    plan.replace_node[inner] = inner.with_changes(func=cst.Name("new_inner"))
    assert apply_plan(module, plan).code == "x = new_outer(1, key=new_inner(2))  # note\n"


def test_inner_edit_survives_a_replaced_statement():
    module = cst.parse_module("if flag:\n    run(step(1))\n")
    stmt = module.body[0]
    call = _calls(module)[1]
    plan = EditPlan()
    plan.replace_stmt[stmt] = list(stmt.body.body)  # unwrap the `if`, keeping its original statements
    plan.replace_node[call] = call.with_changes(func=cst.Name("scaled_step"))
    assert apply_plan(module, plan).code == "run(scaled_step(1))\n"


def test_without_nested_edits_the_replacement_is_used_as_built():
    module = cst.parse_module("a(b(1))\n")
    outer, _ = _calls(module)
    plan = EditPlan()
    new = cst.parse_expression("c()")
    plan.replace_node[outer] = new
    assert apply_plan(module, plan).code == "c()\n"


def test_an_edit_inside_a_block_leaves_the_rest_of_the_module_as_it_was():
    """Only the edited call changes: its block, the statement after it and the other function come
    out byte for byte, and the new tree's code is the new module's code."""
    module = cst.parse_module("def f():\n    if a(1):\n        b()  # keep\n    c( )\n\ndef g():\n    d()\n")
    test = _calls(module)[0]  # a(1), the `if`'s test: the `if` is edited, its block is not
    plan = EditPlan()
    plan.replace_node[test] = test.with_changes(func=cst.Name("e"))
    new = apply_plan(module, plan)
    assert new.code == "def f():\n    if e(1):\n        b()  # keep\n    c( )\n\ndef g():\n    d()\n"
    assert cst.parse_module(new.code).deep_equals(new)
