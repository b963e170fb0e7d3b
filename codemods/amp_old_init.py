"""apex's old amp API for inference: `handle = amp.init(enabled=E)` -> one autocast region for the rest of the function.

`amp.init()` (apex's first amp API, before `amp.initialize`) patched torch's functions for the whole
process from that call on: every op after it ran with O1's fp16 casts. Evaluation scripts call it
once near the top of `main()` and never use the handle it returns (maskrcnn-benchmark's
tools/test_net.py). Natively that is `torch.autocast("cuda", dtype=torch.float16, enabled=E)`
entered at the call and left at the end of the function: the statements after the call move into
one `with` block.

Migrated only when that is the same program: the call is a statement of the function's own body
(not under an `if`, a loop, a `try`), its keywords are `enabled=` and `verbose=` (the verbose log is
dropped), the handle (if bound) is never read, the module has no other apex amp call, and the
function is called in its module only as the last statement of the `if __name__ == "__main__":`
block, so no code of the program runs after it returns (apex's patches outlived the function).
Reported as A2A180 (codemods/amp_handle_rules.py); otherwise the call keeps its A2A115 finding, with the reason.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import libcst as cst

from . import amp_rules as R
from .amp_handle_rules import OLD_INIT
from .code_layout import indent_continuations
from .names import dotted_name, names_read
from .amp_plan_state import AmpSite, code_of, parse_expr

KEPT_KEYWORDS = ("enabled", "verbose")


def _main_guard_tail_only(a, name: str) -> bool:
    """`name` is read in the module only as the callee of a bare call statement that ends an
    `if __name__ == "__main__":` block at module level."""
    uses = [n for n in a.index.names if n.value == name and not isinstance(a.parent(n), (cst.FunctionDef,))]
    if len(uses) != 1:
        return False
    call = a.parent(uses[0])
    if not isinstance(call, cst.Call) or call.func is not uses[0]:
        return False
    expr = a.parent(call)
    line = a.parent(expr)
    if not isinstance(expr, cst.Expr) or not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
        return False
    block = a.parent(line)
    guard = a.parent(block)
    if not isinstance(block, cst.IndentedBlock) or not isinstance(guard, cst.If) or block.body[-1] is not line:
        return False
    if guard.orelse is not None or "__name__" not in names_read(guard.test) or a.parent(guard) is not a.module:
        return False
    return a.module.body[-1] is guard


def _refusal(a, site: AmpSite) -> Optional[str]:
    """Why this `amp.init(...)` cannot become an autocast region, or None."""
    call, stmt, func = site.call, site.stmt, site.func
    if func is None:
        return "it runs at module level"
    if any(s is not site for s in a.sites):
        return "this module has other apex amp calls (the handle's training API)"
    if any(arg.keyword is None or arg.keyword.value not in KEPT_KEYWORDS for arg in call.args):
        return "it takes arguments other than `enabled=` and `verbose=` (loss scaling, caching, banned functions)"
    block, _ = a.block_of(stmt)
    if block is None or a.parent(block) is not func:
        return "it is not a statement of its function's own body (it sits under an `if`, a loop or a `try`)"
    small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
    if isinstance(small, cst.Assign) and small.value is call and len(small.targets) == 1 and \
            isinstance(small.targets[0].target, cst.Name):
        handle = small.targets[0].target.value
        if any(n.value == handle and n is not small.targets[0].target for n in a.index.names):
            return f"its handle `{handle}` is used"
    elif not (isinstance(small, cst.Expr) and small.value is call):
        return "its result is used in an expression"
    if a.class_of(func) is not None or a.func_of(func) is not None:
        return f"`{func.name.value}` is a method or a nested function"
    if not _main_guard_tail_only(a, func.name.value):
        return (f"`{func.name.value}` is not called only at the end of the `if __name__ == \"__main__\":` block, so "
                "code may run after it returns, which apex's patches still covered")
    return None


def plan_old_init(a, site: AmpSite) -> Tuple[bool, Optional[str]]:
    """Plan `amp.init(...)` as an autocast region over the rest of its function; (planned, why not)."""
    why = _refusal(a, site)
    if why is not None:
        return False, why
    call, stmt = site.call, site.stmt
    block, idx = a.block_of(stmt)
    rest: List[cst.BaseStatement] = list(block.body[idx + 1:])  # type: ignore[union-attr]
    if not rest:
        a.plan.remove(stmt)
        a.report(call, OLD_INIT, "`amp.init()` at the end of its function patched nothing that runs: removed",
                 fixed=True)
        return True, None
    args = [f'"{a.device}"', "dtype=torch.float16"]
    enabled = next((arg.value for arg in call.args if arg.keyword is not None and arg.keyword.value == "enabled"),
                   None)
    if enabled is not None:
        args.append(f"enabled={code_of(enabled)}")
    head = parse_expr(f"torch.autocast({', '.join(args)})")
    indent = a.module.default_indent

    def make(stmts: List[cst.BaseStatement], head: cst.BaseExpression = head) -> cst.BaseStatement:
        return cst.With(items=[cst.WithItem(head)], body=cst.IndentedBlock(body=indent_continuations(stmts, indent)))

    a.plan.remove(stmt)
    a.plan.wrap(rest[0], rest[-1], make)
    a.needs_torch = True
    what = f"`{dotted_name(call.func) or 'amp.init'}(...)`"
    a.report(call, OLD_INIT, f"{what} (apex's old API, fp16 casts for the rest of the process) -> the rest of "
                                f"`{site.func.name.value}` runs under `torch.autocast({', '.join(args)})`"
                                + ("; its verbose log is dropped" if any(
                                    arg.keyword is not None and arg.keyword.value == "verbose" for arg in call.args)
                                   else ""), fixed=True)
    return True, None
