"""The worker rewrite of one convertible mp.spawn: the spawn becomes a call of the worker under torchrun.

World-size and global-rank arithmetic becomes torchrun's WORLD_SIZE / RANK, init_process_group reads
env:// (codemods/launch_init.py), hard-coded MASTER_ADDR / MASTER_PORT go, and the spawn line becomes
`worker(int(os.environ["LOCAL_RANK"]), ...)`. The edits are one migration: when an init_process_group
cannot be matched, none of them is kept.
"""
from __future__ import annotations

from typing import Dict, List, Set

import libcst as cst

from . import launch_shapes
from .base import FIX, rule
from .launch_exprs import env, has_effects, is_rank_arithmetic, names_world_size, translate
from .launch_helpers import handed_to_helpers, visible_in
from .launch_facts import INIT_RPC
from .launch_init import init_call
from .launch_local_rank import local_index_as_rank
from .launch_notes import launch_note, nproc_value, pre_spawn_code, rpc_world_count, slurm_launch
from .launch_site import SpawnSite
from .launch_state import LaunchState
from .names import code_of, dotted_name, literal_string, norm_code, parse_stmt


rule("A2A401", "spawn-to-torchrun", "mp.spawn(fn, ...) -> fn(int(os.environ['LOCAL_RANK']), ...) launched by torchrun",
     fixes=True, severity=FIX,
     why="""
torchrun starts one process per device itself and tells each its LOCAL_RANK, RANK and WORLD_SIZE through
the environment, so the in-script mp.spawn goes: the spawned function is called once, in every torchrun
process, with the local rank mp.spawn used to pass. Launch the script with the torchrun line apex2amp
prints (e.g. `torchrun --standalone --nproc_per_node=gpu main.py ...`). A worker that joins an RPC world
(rpc.init_rpc with rank= its process index and world_size= the spawn's count, roles by rank) is called
with torchrun's RANK, its init_rpc keeps rank= / world_size= (now RANK / WORLD_SIZE), and the torchrun
line names the program's process count, not the GPU count.""",
     before="""
import torch.distributed as dist
import torch.multiprocessing as mp


def main_worker(gpu, ngpus_per_node, args):
    dist.init_process_group(backend="nccl", init_method="env://")
    train(gpu, args)


def main(args):
    ngpus_per_node = 2
    mp.spawn(main_worker, nprocs=ngpus_per_node, args=(ngpus_per_node, args))""",
     after="""
import os

import torch.distributed as dist


def main_worker(gpu, ngpus_per_node, args):
    dist.init_process_group(backend="nccl", init_method="env://")
    train(gpu, args)


def main(args):
    ngpus_per_node = int(os.environ["LOCAL_WORLD_SIZE"])
    main_worker(int(os.environ["LOCAL_RANK"]), ngpus_per_node, args)""")


rule("A2A403", "master-addr-port", "hard-coded os.environ['MASTER_ADDR'/'MASTER_PORT'] removed",
     fixes=True, severity=FIX,
     why="""
torchrun sets MASTER_ADDR and MASTER_PORT; overriding them in the script breaks its rendezvous (with
--standalone the store lives on torchrun's own free port). Pass --master_addr/--master_port to torchrun
for multi-node runs instead.""",
     before="""
import os

import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "12355"
    dist.init_process_group("nccl", init_method="env://", rank=rank, world_size=world_size)
    train(rank)


def main():
    world_size = 2
    mp.spawn(worker, args=(world_size,), nprocs=world_size)""",
     after="""
import os

import torch.distributed as dist


def worker(rank, world_size):
    dist.init_process_group("nccl")
    train(rank)


def main():
    world_size = int(os.environ["WORLD_SIZE"])
    worker(int(os.environ["LOCAL_RANK"]), world_size)""")


rule("A2A404", "rank-world-size-from-env", "rank / world size arithmetic -> torchrun's RANK / WORLD_SIZE",
     fixes=True, severity=FIX,
     why="""
With mp.spawn the script computed the global rank (`node_rank * ngpus_per_node + local_index`) and the
world size (`ngpus_per_node * nnodes`) itself. torchrun computes both and exports RANK and WORLD_SIZE,
and LOCAL_WORLD_SIZE for the processes per node.""",
     before="""
import torch.distributed as dist
import torch.multiprocessing as mp


def main_worker(gpu, ngpus_per_node, args):
    args.rank = args.rank * ngpus_per_node + gpu
    dist.init_process_group(backend="nccl", init_method=args.dist_url, world_size=args.world_size, rank=args.rank)
    train(gpu, args)


def main(args):
    ngpus_per_node = 2
    args.world_size = ngpus_per_node * args.world_size
    mp.spawn(main_worker, nprocs=ngpus_per_node, args=(ngpus_per_node, args))""",
     after="""
import os

import torch.distributed as dist


def main_worker(gpu, ngpus_per_node, args):
    dist.init_process_group(backend="nccl")
    train(gpu, args)


def main(args):
    ngpus_per_node = 2
    args.world_size = int(os.environ["WORLD_SIZE"])
    args.rank = int(os.environ["RANK"])
    ngpus_per_node = int(os.environ["LOCAL_WORLD_SIZE"])
    main_worker(int(os.environ["LOCAL_RANK"]), ngpus_per_node, args)""")


def rewrite_spawn(state: LaunchState, site: SpawnSite) -> None:
    """Plan the torchrun form of `site` and everything its worker needs with it."""
    ctx = state.ctx
    call, sp, line, outer, fn_name, fdef = site.call, site.sp, site.line, site.outer, site.fn_name, site.fdef
    reach, inits, local_param, elements, star = site.reach, site.inits, site.local_param, site.elements, site.star
    mapping, scope, spawn_line, nprocs_code = site.mapping, site.scope, site.spawn_line, site.nprocs_code

    snap, reported = state.plan.snapshot(), len(ctx._stage_findings)
    # main side: world size arithmetic
    world_main: Set[str] = set()
    for stmt in state.assignments(scope):
        if state.line(stmt) >= spawn_line:
            continue
        target, value = stmt.targets[0].target, stmt.value
        if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Multiply) and \
                nprocs_code in (norm_code(value.left), norm_code(value.right)) and len(stmt.targets) == 1 and \
                names_world_size(target, value.right if norm_code(value.left) == nprocs_code else value.left):
            world_main.add(norm_code(target))
            state.plan.replace_node[value] = env("WORLD_SIZE")
            ctx.report(stmt, "A2A404", f"{code_of(target)} = torchrun's WORLD_SIZE", fixed=True)
        elif len(stmt.targets) == 1 and norm_code(value) == nprocs_code and norm_code(target) != nprocs_code \
                and isinstance(target, (cst.Name, cst.Attribute)) and "world" in norm_code(target).lower() \
                and names_world_size(target, value):
            # `args.world_size = args.ngpus_per_node`, the spawn's count: one node's world, torchrun's WORLD_SIZE
            world_main.add(norm_code(target))
            state.plan.replace_node[value] = env("WORLD_SIZE")
            ctx.report(stmt, "A2A404", f"{code_of(target)} = torchrun's WORLD_SIZE", fixed=True)
    world_worker = {translate(w, mapping) for w in world_main}
    bound_in: Dict[str, Set[int]] = {}  # plain name -> the functions where it holds the rank / world size
    for w in world_main:
        if w in mapping:
            bound_in.setdefault(mapping[w], set()).add(id(fdef))
    nprocs_attr = None
    if sp.nprocs is not None and isinstance(sp.nprocs.value, cst.Attribute):
        # `nprocs=args.world_size` with `args` passed on: the worker's `args.world_size` is the count
        head = (dotted_name(sp.nprocs.value) or "").split(".")[0]
        if head in mapping:
            world_worker.add(translate(norm_code(sp.nprocs.value), mapping))
            if (dotted_name(sp.nprocs.value) or "").count(".") == 1 and outer is not line:
                # `if opts.n == 1: fn(0, ...) else: spawn(nprocs=opts.n)`, one path now: the worker (and the
                # test it had) reads the count from `opts`, which torchrun's count sets before the call
                nprocs_attr = norm_code(sp.nprocs.value)
    rpc_count_attr = None
    if site.rpc_world and sp.nprocs is not None and isinstance(sp.nprocs.value, cst.Attribute) and elements:
        # `spawn(run_worker, args=(args.world_size,), nprocs=args.world_size)`: that parameter is the count
        for i, e in enumerate(elements):
            if norm_code(e) == nprocs_code and i + 1 < len(site.params) and \
                    (dotted_name(sp.nprocs.value) or "").count(".") == 1:
                world_worker.add(site.params[i + 1])
                bound_in.setdefault(site.params[i + 1], set()).add(id(fdef))
                rpc_count_attr = nprocs_code
    nprocs_role = None
    world_handed: Dict[int, Set[str]] = {}
    if sp.nprocs is not None and isinstance(sp.nprocs.value, cst.Name) and sp.nprocs.value.value in mapping:
        wparam = mapping[sp.nprocs.value.value]
        handed = handed_to_helpers(state, fdef, reach, {wparam})  # `setup(gpu, ngpus)`: setup's world_size

        def counts(c: cst.Call, arg: cst.Arg) -> bool:
            home = state.index.enclosing_function(c)
            return norm_code(arg.value) in ({wparam} if home is fdef else handed.get(id(home), set()))

        as_world = any(counts(c, a) for c in inits for a in c.args
                       if a.keyword is not None and a.keyword.value == "world_size") or \
            any(counts(c, c.args[3]) for c in inits if len(c.args) > 3 and c.args[3].keyword is None)
        nprocs_role = "WORLD_SIZE" if as_world else "LOCAL_WORLD_SIZE"
        if as_world:
            world_worker.add(wparam)
            bound_in.setdefault(wparam, set()).add(id(fdef))
            world_handed = handed

    # worker side: world size from the per-node process count (`args.world_size = ngpus * args.nnodes`)
    per_node = {mapping[sp.nprocs.value.value]} if sp.nprocs is not None and isinstance(sp.nprocs.value, cst.Name) \
        and sp.nprocs.value.value in mapping else set()
    if sp.nprocs is not None and not isinstance(sp.nprocs.value, cst.Name):
        per_node.add(translate(norm_code(sp.nprocs.value), mapping))
    for f in reach:
        assigns = state.assignments(f)
        counted = launch_shapes.device_count_names(assigns)
        for stmt in assigns:
            if len(stmt.targets) != 1:
                continue
            target = stmt.targets[0].target
            nodes = launch_shapes.world_size_product(stmt.value, per_node, counted)
            if nodes is not None and names_world_size(target, nodes) and not has_effects(nodes):
                world_worker.add(norm_code(target))
                bound_in.setdefault(norm_code(target), set()).add(id(f))
                state.plan.replace_node[stmt.value] = env("WORLD_SIZE")
                ctx.report(stmt, "A2A404", f"{code_of(target)} = torchrun's WORLD_SIZE", fixed=True)

    # worker side: global rank arithmetic
    rank_worker: Set[str] = {local_param}
    bound_in.setdefault(local_param, set()).add(id(fdef))
    main_inserts: List[cst.BaseStatement] = []
    for f in reach:
        for stmt in state.assignments(f):
            if len(stmt.targets) != 1:
                continue
            target, value = stmt.targets[0].target, stmt.value
            if not is_rank_arithmetic(value, local_param):
                continue
            rank_worker.add(norm_code(target))
            bound_in.setdefault(norm_code(target), set()).add(id(f))
            head = dotted_name(target)
            back = {v: k for k, v in mapping.items()}
            if f is fdef and isinstance(target, cst.Attribute) and head and head.split(".")[0] in back \
                    and head.count(".") == 1:
                main_name = back[head.split(".")[0]]
                main_inserts.append(parse_stmt(f'{main_name}.{target.attr.value} = int(os.environ["RANK"])\n'))
                state.plan.remove(state.parents[stmt])
            else:
                state.plan.replace_node[value] = env("RANK")
            ctx.report(stmt, "A2A404", f"{code_of(target)} = torchrun's RANK", fixed=True)

    # worker side: `args.rank += gpu` on a start rank main set (`args.rank = node_id * ngpus_per_node`, or 0)
    for stmt, main_target in launch_shapes.rank_increments(state, fdef, local_param, mapping, scope, spawn_line,
                                                           nprocs_code):
        rank_worker.add(norm_code(stmt.target))
        bound_in.setdefault(norm_code(stmt.target), set()).add(id(fdef))
        main_inserts.append(parse_stmt(f'{main_target} = int(os.environ["RANK"])\n'))
        state.plan.remove(state.parents[stmt])
        ctx.report(stmt, "A2A404", f"{code_of(stmt.target)} = torchrun's RANK", fixed=True)

    # init_process_group -> env://, also in a helper the worker hands its rank and world size to
    rank_handed = handed_to_helpers(state, fdef, reach, rank_worker)

    def joins(c: cst.Call) -> bool:
        home = state.index.enclosing_function(c)
        return init_call(state, c, visible_in(home, rank_worker, bound_in) | rank_handed.get(id(home), set()),
                         visible_in(home, world_worker, bound_in) | world_handed.get(id(home), set()))

    if not all([joins(c) for c in inits]):
        # the worker would join a process group torchrun's ranks do not match: convert nothing
        state.plan.restore(snap)
        ctx._stage_findings = ctx._stage_findings[:reported] + [
            f for f in ctx._stage_findings[reported:] if f.code == "A2A409"]
        ctx.report(call, "A2A406", f"{fn_name} joins the process group with a rank or world size torchrun "
                   "cannot supply (see A2A409): convert this launch by hand" + rpc_subworld_note(state, site))
        return

    # MASTER_ADDR / MASTER_PORT
    master: Dict[str, str] = {}
    for f in list(reach) + [scope]:
        for stmt in state.assignments(f):
            if f is scope and scope is not fdef and state.line(stmt) > spawn_line:
                continue
            var = state.master_target(stmt)
            line_stmt = state.parents.get(stmt)
            if var and isinstance(line_stmt, cst.SimpleStatementLine) and len(line_stmt.body) == 1 \
                    and not state.ctx.suppressed(stmt, "A2A403"):
                s = literal_string(stmt.value)
                if s is not None:
                    master[var] = s
                state.plan.remove(line_stmt)
                ctx.report(stmt, "A2A403", f"{var} is set by torchrun (--master_addr/--master_port)", fixed=True)

    # the call itself, plus what main needs before it
    args_out = [cst.Arg(env("RANK" if site.rpc_world else "LOCAL_RANK"))]
    if elements is not None:
        args_out += [cst.Arg(e) for e in elements]
    else:
        args_out.append(cst.Arg(star, star="*"))  # type: ignore[arg-type]
    args_out = [a.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
                for a in args_out[:-1]] + args_out[-1:]
    new_call = cst.Call(func=sp.fn.value, args=args_out)
    before: List[cst.BaseStatement] = list(main_inserts)
    if nprocs_role is not None:
        name = sp.nprocs.value.value  # type: ignore[union-attr]
        assign = state.last_assignment_in_block(outer, name)
        if assign is not None:
            state.plan.replace_node[assign.value] = env(nprocs_role)
        else:
            before.append(parse_stmt(f'{name} = int(os.environ["{nprocs_role}"])\n'))
        ctx.report(call, "A2A404", f"{name} = torchrun's {nprocs_role}", fixed=True)
    elif nprocs_attr is not None:
        # `nprocs=opts.n_proc`: the worker reads the count from `opts`; torchrun's count is the one that runs
        role = attr_role(inits, translate(nprocs_attr, mapping))
        before.append(parse_stmt(f'{nprocs_attr} = int(os.environ["{role}"])\n'))
        ctx.report(call, "A2A404", f"{nprocs_attr} = torchrun's {role}: the process count is torchrun's "
                   f"--nproc_per_node now, not the value {nprocs_attr} had (launch with that many; code before "
                   "the call still reads the old value)", fixed=True)
    elif rpc_count_attr is not None:
        before.append(parse_stmt(f'{rpc_count_attr} = int(os.environ["WORLD_SIZE"])\n'))
        ctx.report(call, "A2A404", f"{rpc_count_attr} = torchrun's WORLD_SIZE: the RPC world is the processes "
                   f"torchrun starts (launch with --nproc_per_node={rpc_world_count(state, sp, scope, spawn_line)})",
                   fixed=True)
    new_line = line.with_changes(body=[line.body[0].with_changes(value=new_call)])
    if outer is not line:
        new_line = new_line.with_changes(leading_lines=outer.leading_lines)
    if before:
        new_line = new_line.with_changes(leading_lines=())
    state.plan.replace_stmt[outer] = before + [new_line]
    state.need_os = True
    state.spawn_rewritten = True
    nproc = rpc_world_count(state, sp, scope, spawn_line) if site.rpc_world else \
        nproc_value(state, sp, scope, spawn_line)
    if site.rpc_world:
        ctx.report(call, "A2A401", f"mp.spawn -> {fn_name}(int(os.environ['RANK']), ...): the worker joins an "
                   "RPC world (rpc.init_rpc), whose roles go by the global rank; its rank= / world_size= are now "
                   f"torchrun's RANK / WORLD_SIZE: launch with torchrun --standalone --nproc_per_node={nproc}",
                   fixed=True)
    else:
        ctx.report(call, "A2A401", f"mp.spawn -> {fn_name}(int(os.environ['LOCAL_RANK']), ...): launch with "
                   f"torchrun --nproc_per_node={nproc}" + slurm_launch(state, line, scope), fixed=True)
    pre_spawn_code(state, line, scope)
    launch_note(state, line, nproc, master, rpc=site.rpc_world)
    if not site.rpc_world:  # an RPC worker is handed RANK, the global rank its roles test
        local_index_as_rank(state, fdef, local_param, rank_worker)


def rpc_subworld_note(state: LaunchState, site: SpawnSite) -> str:
    """What to do where the worker also joins an RPC world of all the spawned processes (pytorch/examples'
    ddp_rpc: a process group of the trainers only, world_size=2 on its own tcp:// port, beside an RPC
    world of every process)."""
    rpcs = [c for f in site.reach for c in state.calls_in(f) if state.table.refers_to(c.func, *INIT_RPC)]
    if not rpcs:
        return ""
    return (f". {site.fn_name} also joins an RPC world of every spawned process (rpc.init_rpc at line "
            f"{state.line(rpcs[0])}); its init_process_group is a smaller world of its own (its own "
            "init_method, a world size that is not the spawn's count), which torchrun does not set up: under "
            f"`torchrun --standalone --nproc_per_node={rpc_world_count(state, site.sp, site.scope, site.spawn_line)}` call "
            f"{site.fn_name}(int(os.environ['RANK']), ...) where the spawn was, pass rank=int(os.environ['RANK']) "
            "and world_size=int(os.environ['WORLD_SIZE']) to rpc.init_rpc, and keep that init_process_group "
            "on a port other than torchrun's --master_port (29500 is torchrun's default)")


def attr_role(inits: List[cst.Call], worker_code: str) -> str:
    """WORLD_SIZE when an init_process_group passes `worker_code` (the worker's name for the spawn's
    process count) as its world size, else LOCAL_WORLD_SIZE (the processes of this node)."""
    for c in inits:
        for i, a in enumerate(c.args):
            if (a.keyword is not None and a.keyword.value == "world_size" or a.keyword is None and i == 3) \
                    and norm_code(a.value) == worker_code:
                return "WORLD_SIZE"
    return "LOCAL_WORLD_SIZE"
