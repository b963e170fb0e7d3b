"""Launch facts across modules: which functions of the run join the process group.

Pass 1 publishes, for each module-level function (or class) of a file whose code reaches
`init_process_group` (itself or through functions of its file), an entry in
`RepoFacts.spawn_entries`: `"<module>.<name>" -> {"path", "line", "init"}` (where its
init_process_group is, and the call's text). Pass 2 reads them where a file spawns a function of
another module (`mp.spawn(mpu.run, ...)` in a `launch_job(cfg, init_method, func)` helper) or where a
spawned worker calls a helper of another module that joins the group (`dist_utils.setup(rank, ws)`):
the findings there then name the very init_process_group the migration must change with the spawn,
instead of "may" (or, worse, "never calls init_process_group").

Nothing here rewrites: a spawn and an init_process_group in two files are one migration that
apex2amp does not write across files, so both stay and the spawn's finding says what to change where.
"""
from __future__ import annotations

import os
import re
from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from .names import code_of

INIT_PG = ("torch.distributed.init_process_group", "torch.distributed.distributed_c10d.init_process_group")
# joining an RPC world: its rank and world size are torchrun's RANK / WORLD_SIZE as well
INIT_RPC = ("torch.distributed.rpc.init_rpc",)
_BUILTINS = set(dir(__import__("builtins")))


def publish(state) -> None:
    """Record this file's functions and classes that join the process group (pass 1)."""
    ctx = state.ctx
    if not ctx.module_name:
        return
    classes = {s.name.value: s for s in state.module.body if isinstance(s, cst.ClassDef)}
    owners: List[Tuple[str, List[cst.CSTNode]]] = [(n, list(state.reachable(f))) for n, f in state.funcs.items()]
    owners += [(n, [c]) for n, c in classes.items()]
    for name, scopes in owners:
        init = next((c for s in scopes for c in state.calls_in(s) if state.table.refers_to(c.func, *INIT_PG)), None)
        if init is not None:
            text = " ".join(code_of(init).split()).replace("( ", "(").replace(", )", ")")
            ctx.exported.spawn_entries[f"{ctx.module_name}.{name}"] = {
                "path": ctx.path, "line": state.line(init), "init": text if len(text) <= 160 else text[:157] + "..."}


def entry_for(state, func: cst.BaseExpression) -> Optional[Tuple[str, Dict[str, object]]]:
    """(qualified name, published entry) of the function of another module that `func` names, when
    pass 1 found that it joins the process group."""
    entries = state.ctx.facts.spawn_entries
    if not entries:
        return None
    quals = sorted(state.table.qualified_names(func))
    if not quals and isinstance(func, cst.Name) and func.value not in state.funcs:
        quals = [f"{m}.{func.value}" for m in sorted(state.table.star_modules)]  # `from pkg.dist import *`
    for qual in quals:
        entry = entries.get(qual)
        if isinstance(entry, dict) and qual.rpartition(".")[0] != state.ctx.module_name:
            return qual, entry
    return None


def where(entry: Dict[str, object]) -> str:
    """`path:line` of the entry's init_process_group, relative to the working folder when under it."""
    path = str(entry.get("path"))
    if os.path.isabs(path):
        rel = os.path.relpath(path)
        path = path if rel.startswith("..") else rel
    return f"{path}:{entry.get('line')}"


def joining_callees(state, calls: List[cst.Call]) -> List[Tuple[str, Dict[str, object]]]:
    """The calls' functions of other modules that pass 1 found joining the process group."""
    out: List[Tuple[str, Dict[str, object]]] = []
    for c in calls:
        hit = entry_for(state, c.func)
        if hit is not None and hit[0] not in [q for q, _ in out]:
            out.append(hit)
    return out


def unresolved_callees(state, calls: List[cst.Call], params: Set[str]) -> List[str]:
    """Names the calls run that nothing in this file defines or imports by name, in a file with a
    `from <project module> import *`: they may come from that module (so may join the group)."""
    stars = [m for m in state.table.star_modules if not _outside_project(m)]
    if not stars:
        return []
    defined = set(state.funcs) | {s.name.value for s in state.module.body if isinstance(s, cst.ClassDef)}
    out: List[str] = []
    for c in calls:
        if isinstance(c.func, cst.Name):
            name = c.func.value
            if name in defined or name in params or name in _BUILTINS or state.table.qualify(name) - {name}:
                continue
            if name not in out:
                out.append(name)
    return [f"{n} (from {' or '.join(stars)} import *)" for n in out]


def local_class_calls(state, calls: List[cst.Call]) -> List[cst.Call]:
    """The calls in the code of the classes of this file that `calls` instantiate (a `Trainer(rank)`
    whose `__init__` calls a helper of another module)."""
    classes = {s.name.value: s for s in state.module.body if isinstance(s, cst.ClassDef)}
    out: List[cst.Call] = []
    seen: Set[str] = set()
    for c in calls:
        if isinstance(c.func, cst.Name) and c.func.value in classes and c.func.value not in seen:
            seen.add(c.func.value)
            out.extend(state.calls_in(classes[c.func.value]))
    return out


def _outside_project(module: str) -> bool:
    import sys
    from .launch_shapes import _THIRD_PARTY
    top = module.lstrip(".").split(".")[0]
    return bool(top) and (top in sys.stdlib_module_names or top in _THIRD_PARTY)


_JOINER = re.compile(r"(init|setup|start)\w*dist|dist\w*(init|setup)", re.IGNORECASE)


def library_joiners(state, calls: List[cst.Call]) -> List[str]:
    """Calls of a library helper that, by its name, joins the process group (`timm.utils.init_distributed_device`,
    `mmcv.runner.init_dist`, `deepspeed.init_distributed`): not torch's, not the standard library's."""
    import sys
    out: List[str] = []
    for c in calls:
        for qual in sorted(state.table.qualified_names(c.func)):
            top = qual.split(".")[0]
            if top in ("torch", "") or top in sys.stdlib_module_names:
                continue
            if _JOINER.search(qual.rpartition(".")[2]) and qual not in out:
                out.append(qual)
    return out
