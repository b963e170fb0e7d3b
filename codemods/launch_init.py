"""init_process_group under torchrun: drop init_method, rank and world_size where torchrun supplies the same values.

When a rank or world size cannot be shown equal to torchrun's RANK / WORLD_SIZE the call is reported
(A2A409) and the whole spawn conversion is given up (codemods/launch_worker.py).
"""
from __future__ import annotations

from typing import Optional, Set

import libcst as cst

from .arg_edits import edit_args
from .base import FIX, WARNING, rule
from .launch_facts import INIT_RPC
from .launch_state import LaunchState
from .names import arg_by, literal_string, norm_code


rule("A2A402", "init-process-group-env", "init_process_group(init_method=..., rank=..., world_size=...) -> env:// of torchrun",
     fixes=True, severity=FIX,
     why="""
Under torchrun, MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE are in the environment and
init_process_group's default env:// reads them. An explicit tcp:// URL or a rank computed by hand would
fight torchrun's rendezvous, so they are dropped where torchrun supplies the same values. Running the
script without torchrun now needs those variables set.""",
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


rule("A2A409", "init-process-group-manual", "init_process_group arguments torchrun may not match",
     fixes=False, severity=WARNING,
     why="""
The spawn was converted, but this init_process_group passes a rank, world size or init_method that the
tool cannot show equal to torchrun's RANK / WORLD_SIZE. Check them: under torchrun call
init_process_group(backend) and let env:// read the environment.""",
     before="""
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(gpu, url, ws):
    dist.init_process_group("nccl", init_method=url, rank=my_rank(), world_size=ws)


def main(url, ws):
    mp.spawn(worker, args=(url, ws), nprocs=ws)""",
     after="dist.init_process_group('nccl')")


def init_call(state: LaunchState, c: cst.Call, rank_worker: Set[str], world_worker: Set[str]) -> bool:
    """Plan the env:// form of one init_process_group; False when torchrun's ranks cannot be matched (A2A409)."""
    ctx = state.ctx
    if ctx.suppressed(c, "A2A402") or any(a.star for a in c.args):
        return True
    if state.table.refers_to(c.func, *INIT_RPC):
        return rpc_call(state, c, rank_worker, world_worker)
    init = arg_by(c, 1, "init_method")
    world = arg_by(c, 3, "world_size")
    rank = arg_by(c, 4, "rank")
    store = arg_by(c, 5, "store")
    if store is not None:
        ctx.report(c, "A2A409", "init_process_group(store=...): torchrun provides its own rendezvous; use "
                   "init_process_group(backend) under torchrun")
        return False

    def ok(arg: Optional[cst.Arg], known: Set[str], env: str) -> bool:
        if arg is None:
            return True
        code = norm_code(arg.value)
        return code in known or f'"{env}"' in code or f"'{env}'" in code

    if not ok(rank, rank_worker, "RANK") or not ok(world, world_worker, "WORLD_SIZE"):
        ctx.report(c, "A2A409", "init_process_group passes a rank/world_size apex2amp cannot match to torchrun's "
                   "RANK/WORLD_SIZE: under torchrun call init_process_group(backend) (env://)")
        return False
    drop = [a for a in (init, world, rank) if a is not None]
    if init is not None and rank is None and world is None:
        s = literal_string(init.value)
        if s == "env://" or s is None:
            return True  # env:// (or a URL from config) with no rank: already torchrun-compatible or not ours
    if not drop:
        return True
    positional_idx = [i for i, a in enumerate(c.args) if a.keyword is None]
    dropped_pos = [c.args.index(a) for a in drop if a.keyword is None]
    if dropped_pos and any(i > min(dropped_pos) and c.args[i] not in drop for i in positional_idx):
        ctx.report(c, "A2A409", "init_process_group with positional timeout: drop init_method/rank/world_size "
                   "by hand (torchrun's env://)")
        return False
    state.plan.replace_node[c] = edit_args(c, drop=drop)
    names = ", ".join(a.keyword.value if a.keyword else ("init_method", "", "", "world_size", "rank")[c.args.index(a)]
                      for a in drop)
    ctx.report(c, "A2A402", f"init_process_group uses torchrun's env:// (dropped {names}); without torchrun, "
               "set MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE", fixed=True)
    return True


def rpc_call(state: LaunchState, c: cst.Call, rank_worker: Set[str], world_worker: Set[str]) -> bool:
    """`rpc.init_rpc(name, rank=rank, world_size=world_size)` stays as it is where its rank is the worker's
    index (now torchrun's RANK) and its world size the spawn's count (now WORLD_SIZE); else A2A409."""
    rank = arg_by(c, 2, "rank")
    world = arg_by(c, 3, "world_size")
    if rank is not None and world is not None and norm_code(rank.value) in rank_worker \
            and norm_code(world.value) in world_worker:
        return True
    state.ctx.report(c, "A2A409", "rpc.init_rpc passes a rank/world_size apex2amp cannot match to torchrun's "
                     "RANK/WORLD_SIZE (it needs rank= the worker's process index and world_size= the spawn's "
                     "count): under torchrun pass rank=int(os.environ['RANK']), "
                     "world_size=int(os.environ['WORLD_SIZE'])")
    return False
