"""Values the spawned worker hands to helpers of its module: `setup(gpu, ngpus)` joining the process group.

A worker often calls `setup(rank, world_size)` (or `init_distributed(gpu, ngpus)`) and the helper calls
init_process_group with its own parameters. A helper parameter stands for the worker's rank (or world
size) when every call of the helper in the module passes that value by name from the worker, or from a
helper already followed, and the helper never rebinds the parameter. Anything else is not followed, and
the init_process_group stays unmatched (A2A409).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Set

import libcst as cst

from .launch_exprs import parameter_receiving
from .launch_state import LaunchState
from .walk import iter_nodes


def handed_to_helpers(state: LaunchState, fdef: cst.FunctionDef, reach: List[cst.FunctionDef],
                      known: Set[str]) -> Dict[int, Set[str]]:
    """id(helper) -> the parameters of that helper (one of `reach`, not `fdef`) that receive one of `known`
    (plain names of `fdef`) at every call site."""
    names_in: Dict[int, Set[str]] = {id(fdef): {n for n in known if "." not in n}}
    changed, rounds = True, 0
    while changed and rounds < 8:
        changed, rounds = False, rounds + 1
        for helper in reach:
            if helper is fdef:
                continue
            sites = [c for c in state.index.calls
                     if isinstance(c.func, cst.Name) and c.func.value == helper.name.value]
            homes = [state.index.enclosing_function(c) for c in sites]
            if not sites or any(h is None or id(h) not in names_in for h in homes):
                continue
            called = {id(c.func) for c in sites}
            if any(id(n) not in called for n in state.index.names
                   if n.value == helper.name.value and n is not helper.name):
                continue  # also used as a value (a callback, a partial): its other callers are unknown
            rebound = _rebound_names(helper)
            got = names_in.setdefault(id(helper), set())
            for param in helper.params.params:
                p = param.name.value
                if p in got or p in rebound:
                    continue
                if all(any(parameter_receiving(c, helper, n) == p for n in names_in[id(h)])  # type: ignore[arg-type]
                       for c, h in zip(sites, homes)):
                    got.add(p)
                    changed = True
    names_in.pop(id(fdef))
    return {k: v for k, v in names_in.items() if v}


def visible_in(home: Optional[cst.FunctionDef], names: Set[str], bound_in: Dict[str, Set[int]]) -> Set[str]:
    """The names of `names` that mean the same in `home` (the function holding an init_process_group):
    attributes (`args.rank`, one object handed along), and plain names that are not `home`'s own
    parameters or locals unless `bound_in` says they hold the value there. A helper's own `rank`
    parameter is not the worker's `rank`."""
    if home is None:
        return set(names)
    own = {p.name.value for p in (list(home.params.posonly_params) + list(home.params.params)
                                  + list(home.params.kwonly_params))} | _rebound_names(home)
    return {n for n in names if "." in n or n not in own or id(home) in bound_in.get(n, set())}


def _rebound_names(func: cst.FunctionDef) -> Set[str]:
    """Plain names `func` (or code nested in it) assigns, rebinds in a loop or `with`, or declares global."""
    out: Set[str] = set()
    for node in iter_nodes(func.body):
        targets: List[cst.CSTNode] = []
        if isinstance(node, cst.Assign):
            targets = [t.target for t in node.targets]
        elif isinstance(node, (cst.AugAssign, cst.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, cst.For):
            targets = [node.target]
        elif isinstance(node, cst.AsName):
            targets = [node.name]
        elif isinstance(node, cst.NamedExpr):
            targets = [node.target]
        elif isinstance(node, (cst.Global, cst.Nonlocal)):
            out.update(n.name.value for n in node.names)
        for t in targets:
            out.update(n.value for n in iter_nodes(t) if isinstance(n, cst.Name))
    return out
