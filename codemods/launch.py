"""mp.spawn and torch.distributed.launch entry points -> torchrun environment.

- `mp.spawn(fn, args=(a, b), nprocs=N)` (resolved through imports) becomes `fn(int(os.environ["LOCAL_RANK"]), a, b)`
  when `fn` is a function of this file that (directly or through helpers) calls `init_process_group`.
  World-size and global-rank arithmetic (`ngpus_per_node * args.world_size`, `args.rank * ngpus_per_node + gpu`)
  becomes torchrun's `WORLD_SIZE` / `RANK`; `init_process_group` drops `init_method`, `rank` and `world_size`
  where torchrun supplies the same values; hard-coded `MASTER_ADDR` / `MASTER_PORT` go. The torchrun command
  that replaces the old launch is recorded in `ctx.launch_notes`.
- `parser.add_argument("--local_rank", ...)` accepts `--local-rank` too and defaults to `LOCAL_RANK`.
- Everything that cannot be shown right (join=False, custom start methods, spawn for non-distributed work,
  a spawned function from another module) is reported, not rewritten.

This module is the codemod: it builds the file's `LaunchState` (codemods/launch_state.py) and runs the
steps, each in its own module: the spawn site (launch_site.py), the worker rewrite (launch_worker.py),
init_process_group (launch_init.py) and the helpers the worker hands its rank and world size to
(launch_helpers.py), --local_rank and the local rank (launch_local_rank.py), and the torchrun notes
(launch_notes.py).
"""
from __future__ import annotations

from typing import List, Optional, Set

import libcst as cst

from .base import Codemod, FileContext
from .edits import EditPlan, apply_plan
from .importing import ensure_imports
from .index import ModuleIndex
from . import launch_facts
from .launch_exprs import ENV
from .launch_local_rank import local_rank_arguments
from .launch_notes import BENIGN_CALLS
from .launch_site import INIT_PG, SPAWN, SPAWN_EDIT_CODES, START_PROCESSES, analyse_spawn
from .launch_state import LaunchState
from .launch_worker import rewrite_spawn
from .names import ImportTable, dotted_name, import_bound_names

__all__ = ["SpawnToTorchrun", "SPAWN", "START_PROCESSES", "INIT_PG", "ENV", "BENIGN_CALLS", "SPAWN_EDIT_CODES"]


class SpawnToTorchrun(Codemod):
    """mp.spawn and torch.distributed.launch entry points -> torchrun environment."""

    NAME = "launch"
    DESCRIPTION = "mp.spawn and torch.distributed.launch entry points -> torchrun environment"
    CODES = ("A2A401", "A2A402", "A2A403", "A2A404", "A2A405", "A2A406", "A2A407", "A2A408", "A2A409",
             "A2A412", "A2A413", "A2A420")
    TOKENS = (b"spawn", b"local_rank", b"local-rank", b"start_processes", b"init_process_group")
    PUBLISHES_FACTS = True  # the functions that join the process group (codemods/launch_facts.py)

    def transform(self, wrapper: cst.MetadataWrapper, ctx: FileContext) -> cst.Module:
        module = wrapper.module
        state = LaunchState(module, ctx)
        local_rank_arguments(state)
        launch_facts.publish(state)  # which functions here join the process group, for spawns in other files
        spawns = [c for c in state.index.calls if state.table.refers_to(c.func, *SPAWN)]
        tangled = _tangled_spawns(state, spawns)
        for call in state.index.calls:
            if id(call) in tangled:
                ctx.report(call, "A2A406", "several mp.spawn calls that can run in one process (one after the "
                           "other, the same worker twice, or a worker that spawns itself): torchrun starts the "
                           "script's processes once, so each phase needs its own launch; migrate by hand")
            elif state.table.refers_to(call.func, *SPAWN):
                site = analyse_spawn(state, call)
                if site is not None:
                    rewrite_spawn(state, site)
            elif state.table.refers_to(call.func, *START_PROCESSES):
                ctx.report(call, "A2A406", "start_processes: call the worker with int(os.environ['LOCAL_RANK']) "
                           "and launch with torchrun by hand")
        if not state.plan:
            return module
        new = apply_plan(module, state.plan)
        if state.need_os:
            new = ensure_imports(new, ["os"])
            if state.spawn_rewritten and any(n != "torch" for n in state.table.names_under("torch.multiprocessing")):
                new = _drop_unused_multiprocessing_import(new, ctx, module)  # indexes the new tree: only when it can act
        return new


def _tangled_spawns(state: LaunchState, spawns: List[cst.Call]) -> Set[int]:
    """ids of the spawn calls one torchrun launch cannot stand for: two in one function that are not
    in different branches of an `if`, two of the same worker, a worker that spawns itstate."""
    def worker(c: cst.Call) -> Optional[str]:
        return dotted_name(c.args[0].value) if c.args and c.args[0].keyword is None else None

    out: Set[int] = set()
    for i, a in enumerate(spawns):
        home = state.index.enclosing_function(a)
        if home is not None and worker(a) == home.name.value:
            out.add(id(a))
        for b in spawns[i + 1:]:
            same_home = home is state.index.enclosing_function(b)
            if (same_home and not _exclusive(state, a, b)) or (not same_home and worker(a) == worker(b)):
                out.update((id(a), id(b)))
    return out


def _exclusive(state: LaunchState, a: cst.CSTNode, b: cst.CSTNode) -> bool:
    """Whether `a` and `b` sit in different branches of one if/elif/else chain."""
    above_a = {id(n) for n in state.index.ancestors(a)}
    for node in state.index.ancestors(b):
        if id(node) in above_a:  # the nearest common ancestor
            return isinstance(node, cst.If) and \
                state.index.contains(node.body, a) != state.index.contains(node.body, b)
    return False


def _drop_unused_multiprocessing_import(module: cst.Module, ctx: FileContext, base: cst.Module) -> cst.Module:
    """The spawn is gone: an import of torch.multiprocessing that nothing uses any more goes too.
    `base`: the tree `module` was rewritten from, whose index the new one copies its shared statements from."""
    index = ModuleIndex.of(module, base=base)  # first: the import table reads it, built from `base`'s
    table = ImportTable(module, ctx.module_name)
    locals_ = {n for n in table.names_under("torch.multiprocessing") if n != "torch"}
    if not locals_:
        return module
    unused = {n for n in locals_ if not index.reads(n)}
    if not unused:
        return module
    plan = EditPlan()
    for imp in index.imports:
        line = index.parent(imp)
        if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1:
            bound = import_bound_names(imp)
            if bound and bound <= unused:
                plan.remove(line)
    return apply_plan(module, plan) if plan else module
