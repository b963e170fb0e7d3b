"""The local rank under torchrun: `--local_rank` arguments, and a worker index read as the global rank.

- `parser.add_argument("--local_rank", ...)` accepts `--local-rank` too and defaults to LOCAL_RANK (A2A408).
- After a spawn conversion, the worker's process index (now LOCAL_RANK) used as a sampler shard or a
  `== 0` gate is reported (A2A412): it repeats on every node.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from .arg_edits import edit_args, kwarg
from .base import FIX, WARNING, rule
from .launch_exprs import compares_to_zero, parameter_receiving, quote_like
from .launch_state import LaunchState
from .names import code_of, dotted_name, literal_string, parse_expr


rule("A2A408", "local-rank-argument", "--local_rank argument -> also --local-rank, default from LOCAL_RANK",
     fixes=True, severity=FIX,
     why="""
torch.distributed.launch passed --local_rank=N (and --local-rank=N since torch 2.0, which parsers that only
know --local_rank reject); torchrun passes nothing and sets LOCAL_RANK. The argument now accepts both
spellings and defaults to the environment, keeping the old default (-1 stays -1 when LOCAL_RANK is unset).""",
     before="""
import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=-1)""",
     after="""
import argparse
import os

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", "--local-rank", type=int, default=int(os.environ.get("LOCAL_RANK", -1)))""")


rule("A2A412", "local-rank-as-global-rank", "the worker's process index, now LOCAL_RANK, read as the global rank",
     fixes=False, severity=WARNING,
     why="""
mp.spawn passed each worker its index on this machine, and single-node code often uses it as the
global rank too: `DistributedSampler(dataset, rank=rank)`, `if rank == 0: save(...)`. After the move to
torchrun the worker receives LOCAL_RANK, which repeats on every node: on more than one node the
shards overlap and every node's first process logs and saves. Use `dist.get_rank()` (or
`int(os.environ["RANK"])`) for those, and keep the local rank for the device. The worker's index is
followed into the functions of the same module it is passed to (`train(args, gpu)`); a worker that
computes its global rank (`node_rank * ngpus + gpu`) is not reported.""",
     before="""
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data.distributed import DistributedSampler


def worker(rank, world_size, dataset):
    dist.init_process_group("nccl", init_method="env://", rank=rank, world_size=world_size)
    sampler = DistributedSampler(dataset, rank=rank)
    if rank == 0:
        save()


def main(dataset):
    world_size = 2
    mp.spawn(worker, args=(world_size, dataset), nprocs=world_size)""",
     after="""
import os

import torch.distributed as dist
from torch.utils.data.distributed import DistributedSampler


def worker(rank, world_size, dataset):
    dist.init_process_group("nccl")
    sampler = DistributedSampler(dataset, rank=rank)
    if rank == 0:
        save()


def main(dataset):
    world_size = int(os.environ["WORLD_SIZE"])
    worker(int(os.environ["LOCAL_RANK"]), world_size, dataset)""")


def local_rank_arguments(state: LaunchState) -> None:
    for call in state.index.calls:
        if not (isinstance(call.func, cst.Attribute) and call.func.attr.value == "add_argument"):
            continue
        flags = [literal_string(a.value) for a in call.args if a.keyword is None]
        if not any(f in ("--local_rank", "--local-rank") for f in flags):
            continue
        if not state.ctx.enabled("A2A408") or state.ctx.suppressed(call, "A2A408") or any(a.star for a in call.args):
            continue
        default = next((a for a in call.args if a.keyword is not None and a.keyword.value == "default"), None)
        required = next((a for a in call.args if a.keyword is not None and a.keyword.value == "required"), None)
        both = "--local_rank" in flags and "--local-rank" in flags
        env_default = default is not None and "LOCAL_RANK" in code_of(default.value)
        if both and (env_default or required is None and default is not None and "LOCAL_RANK" in code_of(default.value)):
            continue
        if both and env_default:
            continue
        positional = [a for a in call.args if a.keyword is None]
        new_args: List[cst.Arg] = []
        replace: Dict[int, cst.Arg] = {}
        drop: List[cst.Arg] = []
        insert_after = call.args.index(positional[-1])
        if not both:
            other = "--local-rank" if "--local_rank" in flags else "--local_rank"
            new_args.append(cst.Arg(cst.SimpleString(quote_like(positional[-1].value, other))))
        note = ""
        if not env_default:
            if required is not None and not (isinstance(required.value, cst.Name) and required.value.value == "False"):
                drop.append(required)
                expr = 'int(os.environ.get("LOCAL_RANK", 0))'
                note = "; required=True dropped (torchrun passes no --local-rank), default LOCAL_RANK or 0"
                if default is not None:
                    replace[call.args.index(default)] = default.with_changes(value=parse_expr(expr))
                else:
                    replace[call.args.index(required)] = kwarg("default", parse_expr(expr)).with_changes(
                        comma=required.comma)
                    drop.remove(required)
            elif default is None or (isinstance(default.value, cst.Name) and default.value.value == "None"):
                expr = 'int(os.environ["LOCAL_RANK"]) if "LOCAL_RANK" in os.environ else None'
                if default is None:
                    new_tail = kwarg("default", parse_expr(expr))
                    call2 = edit_args(call, insert_after=insert_after, new=new_args)
                    call2 = edit_args(call2, insert_after=len(call2.args) - 1, new=[new_tail])
                    state.plan.replace_node[call] = call2
                    state.need_os = True
                    state.ctx.report(call, "A2A408", "--local_rank accepts --local-rank too and defaults to "
                                     "LOCAL_RANK (torchrun)", fixed=True)
                    continue
                replace[call.args.index(default)] = default.with_changes(value=parse_expr(expr))
            else:
                old = code_of(default.value)
                replace[call.args.index(default)] = default.with_changes(
                    value=parse_expr(f'int(os.environ.get("LOCAL_RANK", {old}))'))
            state.need_os = True
        state.plan.replace_node[call] = edit_args(call, drop=drop, replace=replace, insert_after=insert_after,
                                                  new=new_args)
        state.ctx.report(call, "A2A408", "--local_rank accepts --local-rank too and defaults to LOCAL_RANK "
                         f"(torchrun){note}", fixed=True)


def local_index_as_rank(state: LaunchState, fdef: cst.FunctionDef, local_param: str, rank_worker: Set[str]) -> None:
    """Report (once) where the worker reads its process index as the global rank: a sampler shard or
    a `== 0` gate, in the worker or in a function of this module it hands the index to (`train(args,
    gpu)`, `main_worker(rank=gpu)`). Under torchrun that index is LOCAL_RANK, which repeats on
    every node."""
    if len(rank_worker) > 1:
        return  # the worker computes its global rank (node_rank * ngpus + index) and uses that
    todo: List[Tuple[cst.FunctionDef, str]] = [(fdef, local_param)]
    seen: Set[Tuple[int, str]] = set()
    while todo and len(seen) < 16:
        func, param = todo.pop(0)
        if (id(func), param) in seen:
            continue
        seen.add((id(func), param))
        hit = index_read_as_rank(state, func, param)
        if hit is not None:
            report_local_rank(state, hit, param, None if func is fdef else fdef.name.value)
            return
        for c in state.calls_in(func):
            callee = state.module_function(c.func)
            received = parameter_receiving(c, callee, param) if callee is not None else None
            if received is not None:
                todo.append((callee, received))  # type: ignore[arg-type]


def index_read_as_rank(state: LaunchState, func: cst.FunctionDef, param: str) -> Optional[cst.CSTNode]:
    """A `DistributedSampler(rank=param)` or a `param == 0` in `func`, if any."""
    for c in state.calls_in(func):
        if (dotted_name(c.func) or "").rpartition(".")[2] == "DistributedSampler":
            rank = next((a for a in c.args if a.keyword is not None and a.keyword.value == "rank"), None)
            if rank is not None and isinstance(rank.value, cst.Name) and rank.value.value == param:
                return c
    for node in state.index.nodes:
        if type(node) is cst.Comparison and state.index.contains(func, node) and \
                compares_to_zero(node, param):  # type: ignore[arg-type]
            return node
    return None


def report_local_rank(state: LaunchState, node: cst.CSTNode, local_param: str,
                      handed_by: Optional[str] = None) -> None:
    origin = f" (the process index `{handed_by}` hands on)" if handed_by else ""
    state.ctx.report(node, "A2A412", f"`{local_param}`{origin} is torchrun's LOCAL_RANK now, the same on every "
                     "node: for sampler shards and rank-0 gates use `dist.get_rank()` (or RANK) when you run on "
                     "more than one node")
