"""`apply_plan` keeps the comments above the statements it removes (regression: the comment line above
a removed apex import was deleted with it)."""
import libcst as cst

from codemods.edits import EditPlan, apply_plan


def _remove(src: str, *paths):
    """Apply a plan removing the statements at `paths` (indices into nested bodies) of `src`."""
    module = cst.parse_module(src)
    plan = EditPlan()
    for path in paths:
        node = module
        for i in path:
            node = node.body[i] if isinstance(node, cst.Module) else node.body.body[i]
        plan.remove(node)
    return apply_plan(module, plan).code


def test_comment_moves_to_the_next_statement():
    src = "import torch\n#from fused_adam_local import FusedAdam\nfrom apex.optimizers import FusedAdam\nimport amp_C\n"
    assert _remove(src, (1,)) == "import torch\n#from fused_adam_local import FusedAdam\nimport amp_C\n"


def test_comments_of_consecutive_removals_keep_their_order_and_blank_lines():
    src = "a = 1\n\n# one\nb = 2\n# two\n\nc = 3\nd = 4\n"
    assert _remove(src, (1,), (2,)) == "a = 1\n\n# one\n# two\nd = 4\n"


def test_without_a_comment_the_empty_lines_go_to_a_next_statement_that_has_none():
    assert _remove("a = 1\n\nb = 2\nc = 3\n", (1,)) == "a = 1\n\nc = 3\n"
    assert _remove("a = 1\n\nb = 2\n\n\nc = 3\n", (1,)) == "a = 1\n\n\nc = 3\n"  # c keeps its own
    assert _remove("a = 1\n\nb = 2\n\nc = 3\nd = 4\n", (1,), (2,)) == "a = 1\n\nd = 4\n"  # one run, once


def test_comment_of_the_last_statement_stays_at_the_block_end():
    src = "def f():\n    a = 1\n    # note\n    b = 2\nx = 1\n"
    assert _remove(src, (0, 1)) == "def f():\n    a = 1\n    # note\nx = 1\n"
    assert _remove("a = 1\n# note\nb = 2\n", (1,)) == "a = 1\n# note\n"


def test_emptied_block_keeps_the_comment_on_its_pass():
    src = "with ctx():\n    # note\n    a = 1\n"
    assert _remove(src, (0, 0)) == "with ctx():\n    # note\n    pass\n"


def test_comments_leave_a_dropped_compound_for_the_next_statement():
    src = "x = 0\n# guard\nif flag:\n    # inner\n    a = 1\nb = 2\n"
    assert _remove(src, (1, 0)) == "x = 0\n# guard\n# inner\nb = 2\n"


def test_comments_of_an_emptied_try_and_handler_survive():
    module = cst.parse_module("try:\n    # inner\n    import apex\nexcept ImportError:\n    # fallback\n"
                              "    apex = None\nb = 2\n")
    t = module.body[0]
    plan = EditPlan()
    plan.remove(t.body.body[0])
    plan.remove(t.handlers[0].body.body[0])
    assert apply_plan(module, plan).code == "# inner\n# fallback\nb = 2\n"


def test_emptied_if_body_hands_its_comments_to_the_else_body():
    src = "if flag:\n    # note\n    a = 1\nelse:\n    b = 2\n"
    assert _remove(src, (0, 0)) == "if not flag:\n    # note\n    b = 2\n"


def test_replacement_with_its_own_leading_lines_keeps_the_comment():
    module = cst.parse_module("x = 1\n# note\ny = old()\n")
    plan = EditPlan()
    plan.replace_stmt[module.body[1]] = [cst.parse_statement("\n\ny = new()\n")]
    assert apply_plan(module, plan).code == "x = 1\n# note\n\n\ny = new()\n"


def test_replacement_that_kept_the_comment_does_not_repeat_it():
    module = cst.parse_module("x = 1\n# note\ny = old()\n")
    stmt = module.body[1]
    plan = EditPlan()
    plan.replace_stmt[stmt] = [cst.parse_statement("y = new()\n").with_changes(leading_lines=stmt.leading_lines)]
    assert apply_plan(module, plan).code == "x = 1\n# note\ny = new()\n"


def test_small_statements_removed_from_a_line_keep_its_comment():
    module = cst.parse_module("a = 1\n# note\nimport apex; import apex.amp\nb = 2\n")
    line = module.body[1]
    plan = EditPlan()
    for small in line.body:
        plan.remove(small)
    assert apply_plan(module, plan).code == "a = 1\n# note\nb = 2\n"


def test_a_statement_that_becomes_first_in_its_block_drops_its_empty_lines():
    src = "try:\n    import apex\n\n    class A:\n        pass\nexcept ImportError:\n    pass\n"
    assert _remove(src, (0, 0)) == "try:\n    class A:\n        pass\nexcept ImportError:\n    pass\n"
    # at module level the empty lines of the new first statement stay as they were
    assert _remove("import apex\n\nx = 1\n", (0,)) == "\nx = 1\n"
