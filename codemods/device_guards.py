"""Whether a `torch.cuda.set_device(x)` names the device on every path to a later call.

`if args.gpu_rank: torch.cuda.set_device(int(args.gpu_rank))` runs only when `x` is set: a DDP built
where that `if` does not also hold it may see `x` unset (None), so `device_ids=[int(args.gpu_rank)]`
there would raise where apex's DDP (which used the current device) did not.
"""
from __future__ import annotations

from typing import Mapping, Set

import libcst as cst

from .names import dotted_name


def _names_in(expr: cst.CSTNode) -> Set[str]:
    """The dotted names (`args.gpu_rank`, `gpu`) read in `expr`."""
    out: Set[str] = set()

    class V(cst.CSTVisitor):
        def visit_Attribute(self, n: cst.Attribute) -> bool:
            d = dotted_name(n)
            if d:
                out.add(d)
                return False
            return True

        def visit_Name(self, n: cst.Name) -> None:
            out.add(n.value)

    expr.visit(V())
    return out


def guarded_by_own_value(set_device: cst.Call, later: cst.CSTNode, parents: Mapping[cst.CSTNode, cst.CSTNode]) -> bool:
    """True when `set_device` sits under an `if` (or `while`) that tests its own argument's value and
    that does not also hold `later`: on the path to `later` that argument may be unset."""
    if not set_device.args:
        return False
    wanted = _names_in(set_device.args[0].value) - {"int", "str"}
    holders = set()
    cur = parents.get(later)
    while cur is not None:
        holders.add(id(cur))
        cur = parents.get(cur)
    cur = parents.get(set_device)
    while cur is not None and not isinstance(cur, (cst.FunctionDef, cst.Module)):
        if isinstance(cur, (cst.If, cst.While)) and id(cur) not in holders and _names_in(cur.test) & wanted:
            return True
        cur = parents.get(cur)
    return False
