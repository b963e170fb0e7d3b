"""Launch shapes of real training code that codemods/launch.py migrates with these helpers.

- A spawn behind a process-count test with a single-process call of the same worker in the `else`
  (`if world_size > 1: mp.spawn(main, nprocs=world_size, args=(world_size, args)) else: main(0, world_size,
  args)`): under torchrun both are one path, `main(int(os.environ["LOCAL_RANK"]), ...)`, with one process
  for the single-process case (`--nproc_per_node=1`).
- A worker that computes its world size itself from the per-node process count
  (`args.world_size = ngpus * args.nnodes`, `ngpus = torch.cuda.device_count()`): torchrun's WORLD_SIZE.
- A worker that calls a function imported from another module: whether that reaches init_process_group
  is not visible in this file, so the spawn is not called non-distributed (A2A413).
"""
from __future__ import annotations

import sys
from typing import Dict, List, Optional, Sequence, Set, Tuple

import libcst as cst

from .names import dotted_name, literal_number, norm_code


def single_process_twin(gate: cst.If, line: cst.SimpleStatementLine, fn_name: str, params: Sequence[str],
                        elements: Sequence[cst.BaseExpression], nprocs_code: str) -> bool:
    """Whether `gate` is `if T: <the spawn line> else: fn(0, <the spawn's args>)` (or `if n == 1:
    fn(0, ...) else: <the spawn line>`): the single-process branch runs the worker once as process 0
    with the same arguments (or 1 for the process count), which is what torchrun with one process
    does. `params`: the worker's positional parameters."""
    other = gate.orelse
    if not isinstance(other, cst.Else) or not isinstance(other.body, cst.IndentedBlock) or len(other.body.body) != 1:
        return False
    body = gate.body.body if isinstance(gate.body, cst.IndentedBlock) else ()
    if len(body) != 1:
        return False
    if _is_count_test(gate.test) and body[0] is line:
        stmt = other.body.body[0]  # `if n > 1: spawn else: fn(0, ...)`
    elif _is_single_test(gate.test) and other.body.body[0] is line:
        stmt = body[0]  # `if n == 1: fn(rank=0, ...) else: spawn` (stylegan2-ada's train.py)
    else:
        return False  # `if n > 1 and not args.debug:` also picks by a flag: not one torchrun path
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr)):
        return False
    call = stmt.body[0].value
    if not (isinstance(call, cst.Call) and isinstance(call.func, cst.Name) and call.func.value == fn_name):
        return False
    bound = _bind(call, params)
    if bound is None or set(bound) != set(params[:len(elements) + 1]) or len(bound) != len(elements) + 1:
        return False
    if literal_number(bound[params[0]]) != 0 or not isinstance(bound[params[0]], cst.Integer):
        return False
    for i, e in enumerate(elements):
        got = bound[params[i + 1]]
        if norm_code(got) == norm_code(e):
            continue
        if norm_code(e) == nprocs_code and isinstance(got, cst.Integer) and got.value == "1":
            continue  # the single-process branch passes the count it runs with
        return False
    return True


def _is_count_test(test: cst.BaseExpression) -> bool:
    """`count > 1` or `count >= 2` (count: a name, attribute or call, not a boolean expression)."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return False
    op, bound = test.comparisons[0].operator, test.comparisons[0].comparator
    if not isinstance(test.left, (cst.Name, cst.Attribute, cst.Call)) or not isinstance(bound, cst.Integer):
        return False
    return isinstance(op, cst.GreaterThan) and bound.value == "1" or \
        isinstance(op, cst.GreaterThanEqual) and bound.value == "2"


def _is_single_test(test: cst.BaseExpression) -> bool:
    """`count == 1`, `count < 2` or `count <= 1`: the test of the single-process branch."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return False
    op, bound = test.comparisons[0].operator, test.comparisons[0].comparator
    if not isinstance(test.left, (cst.Name, cst.Attribute, cst.Call)) or not isinstance(bound, cst.Integer):
        return False
    return isinstance(op, (cst.Equal, cst.LessThanEqual)) and bound.value == "1" or \
        isinstance(op, cst.LessThan) and bound.value == "2"


def device_count_gate(line: cst.SimpleStatementLine, parents) -> Optional[cst.If]:
    """The `if` right around `line` when its test calls `torch.cuda.device_count()` (a process-count test)."""
    block = parents.get(line)
    gate = parents.get(block)
    if not isinstance(gate, cst.If) or gate.body is not block:
        return None
    from .walk import iter_nodes
    if any(type(n) is cst.Call and (dotted_name(n.func) or "").endswith("cuda.device_count")  # type: ignore[attr-defined]
           for n in iter_nodes(gate.test)):
        return gate
    return None


def _bind(call: cst.Call, params: Sequence[str]) -> Optional[Dict[str, cst.BaseExpression]]:
    """Parameter name -> argument of a plain call (positional, then keywords); None for */** or unknowns."""
    out: Dict[str, cst.BaseExpression] = {}
    for i, a in enumerate(call.args):
        if a.star:
            return None
        if a.keyword is None:
            if i >= len(params):
                return None
            out[params[i]] = a.value
        else:
            if a.keyword.value not in params or a.keyword.value in out:
                return None
            out[a.keyword.value] = a.value
    return out


def counts_processes(factor: cst.BaseExpression, per_node: Set[str], counted_names: Set[str]) -> bool:
    """Whether `factor` is the per-node process count: `torch.cuda.device_count()`, the worker's name
    for the spawn's nprocs (`per_node`), or a local assigned from device_count (`counted_names`)."""
    code = norm_code(factor)
    if code in per_node or code in counted_names:
        return True
    return isinstance(factor, cst.Call) and (dotted_name(factor.func) or "").endswith("cuda.device_count")


def device_count_names(assigns: List[cst.Assign]) -> Set[str]:
    """Plain names a function assigns from `torch.cuda.device_count()` (`ngpus = torch.cuda.device_count()`)."""
    out: Set[str] = set()
    for a in assigns:
        if len(a.targets) == 1 and isinstance(a.targets[0].target, cst.Name) and isinstance(a.value, cst.Call) \
                and (dotted_name(a.value.func) or "").endswith("cuda.device_count") and not a.value.args:
            out.add(a.targets[0].target.value)
    return out


def world_size_product(value: cst.BaseExpression, per_node: Set[str], counted: Set[str]) -> Optional[cst.BaseExpression]:
    """For `count * nnodes` (either order) with `count` the per-node process count, the other factor."""
    if not (isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Multiply)):
        return None
    for a, b in ((value.left, value.right), (value.right, value.left)):
        if counts_processes(a, per_node, counted) and not counts_processes(b, per_node, counted):
            return b
    return None


def foreign_callees(calls: List[cst.Call], table, local_funcs: Set[str]) -> List[str]:
    """Qualified names of the functions these calls run that come from another module of the project
    (imported, not torch / the standard library): code this file cannot see into."""
    out: List[str] = []
    for c in calls:
        name = dotted_name(c.func)
        if not name or name.split(".")[0] in local_funcs:
            continue
        for qual in sorted(table.qualified_names(c.func)):
            top = qual.split(".")[0]
            if top not in sys.stdlib_module_names and top not in _THIRD_PARTY and qual not in out:
                out.append(qual)
    return out


_THIRD_PARTY = {"torch", "torchvision", "numpy", "tqdm", "yaml", "apex", "wandb", "tensorboardX", "PIL", "timm",
                "transformers", "omegaconf", "hydra"}


def rank_increments(state, fdef: cst.FunctionDef, local: str, mapping: Dict[str, str], scope: cst.CSTNode,
                    spawn_line: int, nprocs_code: str) -> List[Tuple[cst.AugAssign, str]]:
    """`args.rank += gpu` in the worker (a statement of its own body), where every assignment of main's
    `args.rank` before the spawn is a start rank: 0 or `<node index> * <the spawn's count>` (barlowtwins:
    `args.rank = int(os.getenv('SLURM_NODEID')) * args.ngpus_per_node`). The sum is then the global rank
    torchrun's RANK is. Returns each such statement with main's spelling of its target."""
    back = {v: k for k, v in mapping.items()}
    body = fdef.body.body if isinstance(fdef.body, cst.IndentedBlock) else ()
    out: List[Tuple[cst.AugAssign, str]] = []
    for line in body:
        if not (isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1
                and isinstance(line.body[0], cst.AugAssign)):
            continue
        aug = line.body[0]
        t = aug.target
        if not (isinstance(aug.operator, cst.AddAssign) and isinstance(aug.value, cst.Name) and aug.value.value == local
                and isinstance(t, cst.Attribute) and isinstance(t.value, cst.Name) and t.value.value in back):
            continue
        main_target = f"{back[t.value.value]}.{t.attr.value}"
        starts = [a for a in state.assignments(scope) if state.line(a) < spawn_line and len(a.targets) == 1
                  and norm_code(a.targets[0].target) == main_target]
        if starts and all(_is_start_rank(a.value, nprocs_code) for a in starts):
            out.append((aug, main_target))
    return out


def _is_start_rank(value: cst.BaseExpression, nprocs_code: str) -> bool:
    """0, or `<node index> * <count>` / `<count> * <node index>` with `<count>` the spawn's process count."""
    if isinstance(value, cst.Integer) and value.value == "0":
        return True
    if not (isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Multiply)):
        return False
    return nprocs_code in (norm_code(value.left), norm_code(value.right)) and \
        norm_code(value.left) != norm_code(value.right)


def loop_around(node: cst.CSTNode, parents) -> Optional[cst.CSTNode]:
    """The `for` / `while` loop of its own function (or of the module) that holds `node`, if any."""
    cur = parents.get(node)
    while cur is not None and not isinstance(cur, (cst.FunctionDef, cst.Module)):
        if isinstance(cur, (cst.For, cst.While)):
            return cur
        cur = parents.get(cur)
    return None
