"""Expression tests the launch migration decides by: rank and world-size arithmetic, parameters, argparse options.

Pure functions of libcst nodes; none reads the file's state or plans an edit.
"""
from __future__ import annotations

from typing import Dict, Optional

import libcst as cst

from .ancestors import enclosing
from .index import ModuleIndex
from .names import code_of, dotted_name, literal_number, literal_string, names_read, parse_expr
from .walk import iter_nodes

ENV = 'int(os.environ["{}"])'


def env(var: str) -> cst.BaseExpression:
    """`int(os.environ["VAR"])`."""
    return parse_expr(ENV.format(var))


def is_rank_arithmetic(value: cst.BaseExpression, local: str) -> bool:
    """`X + local` / `local + X` where X does not involve `local` (node_rank * ngpus + local_index)."""
    if not (isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add)):
        return False
    for a, b in ((value.left, value.right), (value.right, value.left)):
        if isinstance(a, cst.Name) and a.value == local and local not in names_read(b) and not has_effects(b):
            return True
    return False


def parameter_receiving(call: cst.Call, callee: cst.FunctionDef, name: str) -> Optional[str]:
    """The parameter of `callee` that receives the plain name `name` in `call` (positionally, before any
    `*args`, or by keyword), or None."""
    params = callee.params
    positional = list(params.posonly_params) + list(params.params)
    unpacked = False  # a `*args` before it: positions no longer tell the parameter
    for i, arg in enumerate(call.args):
        if arg.star:
            unpacked = True
            continue
        if not (isinstance(arg.value, cst.Name) and arg.value.value == name):
            continue
        if arg.keyword is not None:
            known = {p.name.value for p in positional + list(params.kwonly_params)}
            return arg.keyword.value if arg.keyword.value in known else None
        return positional[i].name.value if i < len(positional) and not unpacked else None
    return None


def compares_to_zero(node: cst.Comparison, name: str) -> bool:
    """`name == 0` or `0 == name`."""
    if len(node.comparisons) != 1 or not isinstance(node.comparisons[0].operator, cst.Equal):
        return False
    a, b = node.left, node.comparisons[0].comparator
    return any(isinstance(x, cst.Name) and x.value == name and isinstance(y, cst.Integer) and y.value == "0"
               for x, y in ((a, b), (b, a)))


def names_world_size(target: cst.BaseExpression, factor: cst.BaseExpression) -> bool:
    """Whether `target = factor * nprocs` reads as a world size (`args.world_size = ngpus * args.world_size`,
    `world = n_gpus * nnodes`) and not as a start rank (`start_rank = node_rank * ngpus`)."""
    t, f = code_of(target).lower(), code_of(factor).lower()
    if "rank" in t or "rank" in f:
        return False
    return "world" in t or "size" in t or "world" in f or "node" in f


PURE_CALLS = {"int", "len", "min", "max", "float", "str", "abs", "getattr", "get", "getenv"}


def has_effects(expr: cst.BaseExpression) -> bool:
    """Whether `expr` calls something that may do more than compute a value (`kwargs.pop("start_rank", 0)`):
    replacing it would drop that effect."""
    return any(type(n) is cst.Call and (dotted_name(n.func) or "").rpartition(".")[2] not in PURE_CALLS  # type: ignore[attr-defined]
               for n in iter_nodes(expr))


def translate(code: str, mapping: Dict[str, str]) -> str:
    head, dot, rest = code.partition(".")
    return mapping.get(head, head) + dot + rest


def is_param(node: cst.CSTNode, name: str, parents) -> bool:
    f = enclosing(node, parents, (cst.FunctionDef,))
    while f is not None:
        if any(p.name.value == name for p in f.params.params + f.params.kwonly_params):  # type: ignore[operator]
            return True
        f = enclosing(f, parents, (cst.FunctionDef,))
    return False


def quote_like(node: cst.BaseExpression, text: str) -> str:
    q = "'" if isinstance(node, cst.SimpleString) and node.value.startswith("'") else '"'
    return f"{q}{text}{q}"


def argparse_options(module: cst.Module) -> Dict[str, Dict]:
    """dest -> {"flag", "default", "action"} for add_argument calls with literal option strings."""
    out: Dict[str, Dict] = {}
    for c in ModuleIndex.of(module).calls:
        if not (isinstance(c.func, cst.Attribute) and c.func.attr.value == "add_argument"):
            continue
        flags = [literal_string(a.value) for a in c.args if a.keyword is None]
        flags = [f for f in flags if f]
        longs = [f for f in flags if f.startswith("--")]
        if not longs and not flags:
            continue
        info: Dict = {"flag": (longs or flags)[0]}
        dest = (longs or flags)[0].lstrip("-").replace("-", "_")
        for a in c.args:
            if a.keyword is None:
                continue
            k = a.keyword.value
            if k == "dest":
                dest = literal_string(a.value) or dest
            elif k == "default":
                num = literal_number(a.value)
                s = literal_string(a.value)
                info["default"] = int(num) if num is not None and num == int(num) else (num if num is not None else s)
            elif k == "action":
                info["action"] = literal_string(a.value)
        out.setdefault(dest, info)
    return out
