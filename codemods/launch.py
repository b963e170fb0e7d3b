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
"""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Set, Tuple

import libcst as cst

from . import launch_shapes
from .apex_parallel import edit_args, enclosing, kwarg
from .base import FIX, INFO, WARNING, Codemod, FileContext, rule
from .edits import EditPlan, apply_plan
from .importing import ensure_imports
from .index import ModuleIndex, parent_mapping, positions_of
from .names import (names_read, import_bound_names, ImportTable, arg_by, code_of, dotted_name, literal_number, literal_string,
                    norm_code, parse_expr, parse_stmt)
from .walk import Visitor

SPAWN = ("torch.multiprocessing.spawn", "torch.multiprocessing.spawn.spawn")
START_PROCESSES = ("torch.multiprocessing.start_processes", "torch.multiprocessing.spawn.start_processes")
INIT_PG = ("torch.distributed.init_process_group", "torch.distributed.distributed_c10d.init_process_group")
ENV = 'int(os.environ["{}"])'
BENIGN_CALLS = {
    "parse_args", "parse_known_args", "add_argument", "add_argument_group", "ArgumentParser", "warn", "seed",
    "manual_seed", "manual_seed_all", "device_count", "is_available", "int", "str", "float", "bool", "len",
    "get", "getenv", "print", "format", "join", "split", "vars", "setdefault", "basicConfig", "getLogger",
    "info", "debug", "set_start_method", "use_deterministic_algorithms", "range", "list", "dict", "tuple",
}

rule("A2A401", "spawn-to-torchrun", "mp.spawn(fn, ...) -> fn(int(os.environ['LOCAL_RANK']), ...) launched by torchrun",
     fixes=True, severity=FIX,
     why="""
torchrun starts one process per device itself and tells each its LOCAL_RANK, RANK and WORLD_SIZE through
the environment, so the in-script mp.spawn goes: the spawned function is called once, in every torchrun
process, with the local rank mp.spawn used to pass. Launch the script with the torchrun line apex2amp
prints (e.g. `torchrun --standalone --nproc_per_node=gpu main.py ...`).""",
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

rule("A2A405", "pre-spawn-code-every-rank", "code before the old mp.spawn now runs in every torchrun process",
     fixes=False, severity=WARNING,
     why="""
Under mp.spawn, code before the spawn ran once, in the parent. Under torchrun the whole script runs in
every process, so downloads, dataset preparation or file writes before the old spawn now run N times at
once. Guard them: `if int(os.environ["RANK"]) == 0: prepare()` followed by `dist.barrier()` after
init_process_group (or run them before launching).""",
     before="""
import torch.distributed as dist
import torch.multiprocessing as mp


def train(rank, n):
    dist.init_process_group("nccl", init_method="env://")
    run(rank)


def main(root, n):
    download_dataset(root)
    mp.spawn(train, args=(n,), nprocs=n)""",
     after="""
import os

import torch.distributed as dist


def train(rank, n):
    dist.init_process_group("nccl", init_method="env://")
    run(rank)


def main(root, n):
    download_dataset(root)
    n = int(os.environ["LOCAL_WORLD_SIZE"])
    train(int(os.environ["LOCAL_RANK"]), n)""")

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

rule("A2A406", "spawn-manual", "mp.spawn call that cannot be converted automatically",
     fixes=False, severity=WARNING,
     why="""
join=False (the ProcessContext is used), a start method other than spawn, start_processes, a spawned
function defined in another module (or passed in as a parameter when the helper's call sites in this
file do not all pass the same function), or a spawn whose result is used cannot be mapped to torchrun
mechanically. Nor can a spawn whose function joins the process group with a rank or world size that
apex2amp cannot match to torchrun's RANK / WORLD_SIZE (A2A409 names it): converting the launch but not
the init would start processes that disagree about their ranks, while the mp.spawn program still
works as it is. Call the function with int(os.environ["LOCAL_RANK"]) yourself, let init_process_group
read env://, and launch with torchrun.""",
     before="""
import torch.distributed as dist
import torch.multiprocessing as mp


def fn(rank):
    dist.init_process_group("nccl", init_method="env://")


def main(n):
    ctx = mp.spawn(fn, nprocs=n, join=False)
    ctx.join()""",
     after='fn(int(os.environ["LOCAL_RANK"]))  # launched by torchrun --nproc_per_node=n')

rule("A2A407", "spawn-not-distributed", "mp.spawn for work that never calls init_process_group is left alone",
     fixes=False, severity=INFO,
     why="""
The spawned function never calls init_process_group (directly or through functions of this file), so this
spawn is process-level parallelism (data preparation, evaluation workers), not a distributed training
launch. It stays as it is.""",
     before="""
import torch.multiprocessing as mp


def preprocess_shard(i):
    convert(i)


if __name__ == "__main__":
    mp.spawn(preprocess_shard, nprocs=8)""",
     after="mp.spawn(preprocess_shard, nprocs=8)")

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

rule("A2A410", "launch-script-torchrun", "python -m torch.distributed.launch -> torchrun in shell/launch files",
     fixes=True, severity=FIX,
     why="""
torch.distributed.launch is deprecated in favour of torchrun, which always behaves like --use_env (it sets
LOCAL_RANK and passes no --local_rank). The launcher flags --nproc_per_node, --nnodes, --node_rank,
--master_addr and --master_port keep their meaning; --use_env is dropped.""",
     before="""
#!/bin/bash
python -m torch.distributed.launch --nproc_per_node=8 --use_env train.py --epochs 90""",
     after="""
#!/bin/bash
torchrun --nproc_per_node=8 train.py --epochs 90""")

rule("A2A411", "launch-command-in-docs", "torch.distributed.launch / mp launch command in documentation",
     fixes=False, severity=INFO,
     why="""
A README or other documentation shows a launch with python -m torch.distributed.launch (or
apex.parallel.multiproc). Documentation is never rewritten: update the command to torchrun by hand.""",
     before="""
Train on 4 GPUs:

    python -m torch.distributed.launch --nproc_per_node=4 train.py""",
     after="torchrun --nproc_per_node=4 train.py")

rule("A2A420", "plain-python-launch-of-torchrun-script", "`python SCRIPT.py` of a script migrated to torchrun",
     fixes=True, severity=FIX,
     why="""
The run rewrote SCRIPT.py's mp.spawn: the spawned function now takes `int(os.environ["LOCAL_RANK"])`
and init_process_group reads torchrun's environment, so a plain `python SCRIPT.py` fails with
KeyError: 'LOCAL_RANK'. In shell scripts, Makefiles and similar files the launch line becomes the
torchrun line (nproc_per_node from the old spawn's nprocs, "gpu" for device_count()); documentation
is only reported. Lines whose script cannot be resolved to a migrated file of the run are left as they are.""",
     before="CUDA_VISIBLE_DEVICES=0,1 python train.py --epochs 10",
     after="CUDA_VISIBLE_DEVICES=0,1 torchrun --standalone --nproc_per_node=gpu train.py --epochs 10")
# A2A420 is applied to the run's launch files by migrate/launch_torchrun.py


rule("A2A413", "spawn-init-in-other-module", "the spawned worker may join the process group in another module",
     fixes=False, severity=WARNING,
     why="""
The spawned function calls a function imported from another module of the project (a `setup(rank,
world_size)` or `init_distributed(args)` helper), and nothing in this file calls init_process_group.
That helper probably joins the process group, so this is a distributed launch, but its rank, world size
and init_method are in a file this one cannot show, and converting only the launch would leave them
fighting torchrun's. Convert both by hand: call the worker with int(os.environ["LOCAL_RANK"]), let the
helper's init_process_group read env:// (drop init_method, rank, world_size and MASTER_ADDR/PORT), and
launch with the torchrun line the finding names.""",
     before="""
import torch.multiprocessing as mp

import utils


def worker(rank, world_size):
    utils.setup(rank, world_size)
    train(rank)


def main(world_size):
    mp.spawn(worker, args=(world_size,), nprocs=world_size)""",
     after='worker(int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"]))  # torchrun --nproc_per_node=N')


def _env(var: str) -> cst.BaseExpression:
    return parse_expr(ENV.format(var))


# the rules of the edits one mp.spawn conversion makes together
SPAWN_EDIT_CODES = ("A2A401", "A2A402", "A2A403", "A2A404")


class _Spawn:
    """What is known about one mp.spawn call."""

    def __init__(self, call: cst.Call):
        self.call = call
        self.fn = arg_by(call, 0, "fn")
        self.args = arg_by(call, 1, "args")
        self.nprocs = arg_by(call, 2, "nprocs")
        self.join = arg_by(call, 3, "join")
        self.daemon = arg_by(call, 4, "daemon")
        self.start_method = arg_by(call, 5, "start_method")


class SpawnToTorchrun(Codemod):
    """mp.spawn and torch.distributed.launch entry points -> torchrun environment."""

    NAME = "launch"
    DESCRIPTION = "mp.spawn and torch.distributed.launch entry points -> torchrun environment"
    CODES = ("A2A401", "A2A402", "A2A403", "A2A404", "A2A405", "A2A406", "A2A407", "A2A408", "A2A409",
             "A2A412", "A2A413", "A2A420")
    TOKENS = (b"spawn", b"local_rank", b"local-rank", b"start_processes")
    # a --local_rank argument is one statement's edit (plus `import os`): only the statements that spell
    # the flag are read (not every `args.local_rank`); spawns read the whole module
    REGION_TOKENS = (b"--local_rank", b"--local-rank")
    REGION_BLOCKERS = (b"spawn", b"start_processes", b"multiprocessing")

    def transform(self, wrapper: cst.MetadataWrapper, ctx: FileContext) -> cst.Module:
        module = wrapper.module
        self.table = ImportTable.of(module, ctx.module_name)
        self.index = ModuleIndex.of(module)
        self.parents = parent_mapping(module)
        self._under: Optional[Dict[int, List[cst.Call]]] = None
        self._owned: Optional[Dict[int, List[cst.Assign]]] = None
        self.positions = positions_of(module)
        self.module = module
        self.ctx = ctx
        self.plan = EditPlan()
        self.need_os = False
        self.spawn_rewritten = False  # only then may an unused torch.multiprocessing import go
        self.funcs: Dict[str, cst.FunctionDef] = {
            s.name.value: s for s in module.body if isinstance(s, cst.FunctionDef)}
        self.argparse = _argparse_options(module)
        self._local_rank_arguments()
        spawns = [c for c in self.index.calls if self.table.refers_to(c.func, *SPAWN)]
        tangled = self._tangled_spawns(spawns)
        for call in self.index.calls:
            if id(call) in tangled:
                ctx.report(call, "A2A406", "several mp.spawn calls that can run in one process (one after the "
                           "other, the same worker twice, or a worker that spawns itself): torchrun starts the "
                           "script's processes once, so each phase needs its own launch; migrate by hand")
            elif self.table.refers_to(call.func, *SPAWN):
                self._spawn(call)
            elif self.table.refers_to(call.func, *START_PROCESSES):
                ctx.report(call, "A2A406", "start_processes: call the worker with int(os.environ['LOCAL_RANK']) "
                           "and launch with torchrun by hand")
        if not self.plan:
            return module
        new = apply_plan(module, self.plan)
        if self.need_os:
            new = ensure_imports(new, ["os"])
            if self.spawn_rewritten and any(n != "torch" for n in self.table.names_under("torch.multiprocessing")):
                new = _drop_unused_multiprocessing_import(new, ctx, module)  # indexes the new tree: only when it can act
        return new

    def _tangled_spawns(self, spawns: List[cst.Call]) -> Set[int]:
        """ids of the spawn calls one torchrun launch cannot stand for: two in one function that are not
        in different branches of an `if`, two of the same worker, a worker that spawns itself."""
        def worker(c: cst.Call) -> Optional[str]:
            return dotted_name(c.args[0].value) if c.args and c.args[0].keyword is None else None

        out: Set[int] = set()
        for i, a in enumerate(spawns):
            home = self.index.enclosing_function(a)
            if home is not None and worker(a) == home.name.value:
                out.add(id(a))
            for b in spawns[i + 1:]:
                same_home = home is self.index.enclosing_function(b)
                if (same_home and not self._exclusive(a, b)) or (not same_home and worker(a) == worker(b)):
                    out.update((id(a), id(b)))
        return out

    def _exclusive(self, a: cst.CSTNode, b: cst.CSTNode) -> bool:
        """Whether `a` and `b` sit in different branches of one if/elif/else chain."""
        above_a = {id(n) for n in self.index.ancestors(a)}
        for node in self.index.ancestors(b):
            if id(node) in above_a:  # the nearest common ancestor
                return isinstance(node, cst.If) and \
                    self.index.contains(node.body, a) != self.index.contains(node.body, b)
        return False

    # -- --local_rank ---------------------------------------------------------------------------------
    def _local_rank_arguments(self) -> None:
        for call in self.index.calls:
            if not (isinstance(call.func, cst.Attribute) and call.func.attr.value == "add_argument"):
                continue
            flags = [literal_string(a.value) for a in call.args if a.keyword is None]
            if not any(f in ("--local_rank", "--local-rank") for f in flags):
                continue
            if not self.ctx.enabled("A2A408") or self.ctx.suppressed(call, "A2A408") or any(a.star for a in call.args):
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
                new_args.append(cst.Arg(cst.SimpleString(_quote_like(positional[-1].value, other))))
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
                        self.plan.replace_node[call] = call2
                        self.need_os = True
                        self.ctx.report(call, "A2A408", "--local_rank accepts --local-rank too and defaults to "
                                        "LOCAL_RANK (torchrun)", fixed=True)
                        continue
                    replace[call.args.index(default)] = default.with_changes(value=parse_expr(expr))
                else:
                    old = code_of(default.value)
                    replace[call.args.index(default)] = default.with_changes(
                        value=parse_expr(f'int(os.environ.get("LOCAL_RANK", {old}))'))
                self.need_os = True
            self.plan.replace_node[call] = edit_args(call, drop=drop, replace=replace, insert_after=insert_after,
                                                     new=new_args)
            self.ctx.report(call, "A2A408", "--local_rank accepts --local-rank too and defaults to LOCAL_RANK "
                            f"(torchrun){note}", fixed=True)

    # -- mp.spawn ---------------------------------------------------------------------------------------
    def _spawn(self, call: cst.Call) -> None:
        ctx = self.ctx
        if not ctx.enabled("A2A401") or ctx.suppressed(call, "A2A401"):
            return
        off = [c for c in SPAWN_EDIT_CODES if not ctx.enabled(c)]
        if off:  # the spawn's edits are one migration: none of them, or all
            ctx.report(call, "A2A406", f"mp.spawn left as it is: its migration also needs {', '.join(off)}, "
                       "which this run's selection leaves out")
            return
        sp = _Spawn(call)
        expr_parent = self.parents.get(call)
        line = self.parents.get(expr_parent) if isinstance(expr_parent, cst.Expr) else None
        if any(a.star for a in call.args) or sp.fn is None:
            ctx.report(call, "A2A406", "mp.spawn with */** arguments: call the worker with "
                       "int(os.environ['LOCAL_RANK']) and launch with torchrun by hand")
            return
        fn_name = sp.fn.value.value if isinstance(sp.fn.value, cst.Name) else None
        fdef = self.funcs.get(fn_name) if fn_name else None
        if fdef is None and fn_name and _is_param(call, fn_name, self.parents):
            fdef = self._function_passed_in(call, fn_name)
        if fdef is None:
            where = "passed in as a parameter" if fn_name and _is_param(call, fn_name, self.parents) else \
                "defined in another module or not a plain function"
            ctx.report(call, "A2A406", f"the spawned function is {where}: call it with "
                       "int(os.environ['LOCAL_RANK']) (plus its args) where the spawn was, make its "
                       "init_process_group use env://, and launch with torchrun")
            return
        reach = self._reachable(fdef)
        inits = [c for f in reach for c in self._calls_in(f) if self.table.refers_to(c.func, *INIT_PG)]
        if not inits:
            foreign = launch_shapes.foreign_callees([c for f in reach for c in self._calls_in(f)], self.table,
                                                    set(self.funcs))
            if foreign:
                ctx.report(call, "A2A413", f"{fn_name} calls {', '.join(foreign[:3])} from another module, which "
                           "may call init_process_group (this file cannot show it): if it does, call "
                           f"{fn_name}(int(os.environ['LOCAL_RANK']), ...) where the spawn was, make that "
                           "init_process_group read env:// (no init_method/rank/world_size, no MASTER_ADDR/PORT), "
                           f"and launch with torchrun --nproc_per_node={self._nproc_value(sp, self.module, 0)} "
                           f"{ctx.path} ...")
                return
            ctx.report(call, "A2A407", f"{fn_name} never calls init_process_group: this spawn is not a "
                       "distributed launch and stays")
            return
        if sp.join is not None and not (isinstance(sp.join.value, cst.Name) and sp.join.value.value == "True"):
            ctx.report(call, "A2A406", "mp.spawn(join=False): the ProcessContext is used; convert to torchrun by hand")
            return
        if sp.start_method is not None and literal_string(sp.start_method.value) != "spawn":
            ctx.report(call, "A2A406", "mp.spawn with a custom start_method: torchrun starts processes itself; "
                       "convert by hand")
            return
        if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
            ctx.report(call, "A2A406", "the result of mp.spawn is used: convert to torchrun by hand")
            return
        gate = self._count_gate(line, sp)
        params = [p.name.value for p in fdef.params.params]
        outer: cst.BaseStatement = line  # the statement the torchrun call replaces
        twin_gate = gate if gate is not None else launch_shapes.device_count_gate(line, self.parents)
        if twin_gate is not None and params and isinstance(sp.args.value if sp.args else cst.Tuple([]), cst.Tuple) \
                and launch_shapes.single_process_twin(
                    twin_gate, line, fn_name or "", params,
                    [e.value for e in sp.args.value.elements] if sp.args else [],  # type: ignore[union-attr]
                    norm_code(sp.nprocs.value) if sp.nprocs is not None else "1"):
            outer, gate = twin_gate, None  # `if n > 1: spawn else: fn(0, ...)`: one torchrun path for both
        if gate is not None:
            ctx.report(call, "A2A406", f"the spawn runs only when `{code_of(gate.test)}`, a test of the process "
                       "count torchrun would set: launch the single-process path with torchrun too, or convert by "
                       "hand")
            return
        if not params or fdef.params.posonly_params:
            ctx.report(call, "A2A406", f"{fn_name} takes no positional process index; convert by hand")
            return
        local_param = params[0]
        # spawn args -> call args
        elements: Optional[List[cst.BaseExpression]] = None
        star: Optional[cst.BaseExpression] = None
        if sp.args is None:
            elements = []
        elif isinstance(sp.args.value, cst.Tuple) and not any(isinstance(e, cst.StarredElement)
                                                              for e in sp.args.value.elements):
            elements = [e.value for e in sp.args.value.elements]
        else:
            star = sp.args.value
        mapping: Dict[str, str] = {}  # main-side Name -> worker param
        if elements is not None:
            for i, e in enumerate(elements):
                if isinstance(e, cst.Name) and i + 1 < len(params):
                    mapping[e.value] = params[i + 1]
        scope = enclosing(call, self.parents, (cst.FunctionDef,)) or self.module
        spawn_line = self._line(call)
        nprocs_code = norm_code(sp.nprocs.value) if sp.nprocs is not None else "1"

        snap, reported = self.plan.snapshot(), len(ctx._stage_findings)
        # main side: world size arithmetic
        world_main: Set[str] = set()
        for stmt in self._assignments(scope):
            if self._line(stmt) >= spawn_line:
                continue
            target, value = stmt.targets[0].target, stmt.value
            if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Multiply) and \
                    nprocs_code in (norm_code(value.left), norm_code(value.right)) and len(stmt.targets) == 1 and \
                    _names_world_size(target, value.right if norm_code(value.left) == nprocs_code else value.left):
                world_main.add(norm_code(target))
                self.plan.replace_node[value] = _env("WORLD_SIZE")
                ctx.report(stmt, "A2A404", f"{code_of(target)} = torchrun's WORLD_SIZE", fixed=True)
        world_worker = {_translate(w, mapping) for w in world_main}
        if sp.nprocs is not None and isinstance(sp.nprocs.value, cst.Attribute):
            # `nprocs=args.world_size` with `args` passed on: the worker's `args.world_size` is the count
            head = (dotted_name(sp.nprocs.value) or "").split(".")[0]
            if head in mapping:
                world_worker.add(_translate(norm_code(sp.nprocs.value), mapping))
        nprocs_role = None
        if sp.nprocs is not None and isinstance(sp.nprocs.value, cst.Name) and sp.nprocs.value.value in mapping:
            wparam = mapping[sp.nprocs.value.value]
            as_world = any(norm_code(a.value) == wparam for c in inits for a in c.args
                           if a.keyword is not None and a.keyword.value == "world_size") or \
                any(norm_code(c.args[3].value) == wparam for c in inits if len(c.args) > 3 and c.args[3].keyword is None)
            nprocs_role = "WORLD_SIZE" if as_world else "LOCAL_WORLD_SIZE"
            if as_world:
                world_worker.add(wparam)

        # worker side: world size from the per-node process count (`args.world_size = ngpus * args.nnodes`)
        per_node = {mapping[sp.nprocs.value.value]} if sp.nprocs is not None and isinstance(sp.nprocs.value, cst.Name) \
            and sp.nprocs.value.value in mapping else set()
        if sp.nprocs is not None and not isinstance(sp.nprocs.value, cst.Name):
            per_node.add(_translate(norm_code(sp.nprocs.value), mapping))
        for f in reach:
            assigns = self._assignments(f)
            counted = launch_shapes.device_count_names(assigns)
            for stmt in assigns:
                if len(stmt.targets) != 1:
                    continue
                target = stmt.targets[0].target
                nodes = launch_shapes.world_size_product(stmt.value, per_node, counted)
                if nodes is not None and _names_world_size(target, nodes) and not _has_effects(nodes):
                    world_worker.add(norm_code(target))
                    self.plan.replace_node[stmt.value] = _env("WORLD_SIZE")
                    ctx.report(stmt, "A2A404", f"{code_of(target)} = torchrun's WORLD_SIZE", fixed=True)

        # worker side: global rank arithmetic
        rank_worker: Set[str] = {local_param}
        main_inserts: List[cst.BaseStatement] = []
        for f in reach:
            for stmt in self._assignments(f):
                if len(stmt.targets) != 1:
                    continue
                target, value = stmt.targets[0].target, stmt.value
                if not _is_rank_arithmetic(value, local_param):
                    continue
                rank_worker.add(norm_code(target))
                head = dotted_name(target)
                back = {v: k for k, v in mapping.items()}
                if f is fdef and isinstance(target, cst.Attribute) and head and head.split(".")[0] in back \
                        and head.count(".") == 1:
                    main_name = back[head.split(".")[0]]
                    main_inserts.append(parse_stmt(f'{main_name}.{target.attr.value} = int(os.environ["RANK"])\n'))
                    self.plan.remove(self.parents[stmt])
                else:
                    self.plan.replace_node[value] = _env("RANK")
                ctx.report(stmt, "A2A404", f"{code_of(target)} = torchrun's RANK", fixed=True)

        # init_process_group -> env://
        if not all([self._init_call(c, rank_worker, world_worker) for c in inits]):
            # the worker would join a process group torchrun's ranks do not match: convert nothing
            self.plan.restore(snap)
            ctx._stage_findings = ctx._stage_findings[:reported] + [
                f for f in ctx._stage_findings[reported:] if f.code == "A2A409"]
            ctx.report(call, "A2A406", f"{fn_name} joins the process group with a rank or world size torchrun "
                       "cannot supply (see A2A409): convert this launch by hand")
            return

        # MASTER_ADDR / MASTER_PORT
        master: Dict[str, str] = {}
        for f in list(reach) + [scope]:
            for stmt in self._assignments(f):
                if f is scope and scope is not fdef and self._line(stmt) > spawn_line:
                    continue
                var = self._master_target(stmt)
                line_stmt = self.parents.get(stmt)
                if var and isinstance(line_stmt, cst.SimpleStatementLine) and len(line_stmt.body) == 1 \
                        and not self.ctx.suppressed(stmt, "A2A403"):
                    s = literal_string(stmt.value)
                    if s is not None:
                        master[var] = s
                    self.plan.remove(line_stmt)
                    ctx.report(stmt, "A2A403", f"{var} is set by torchrun (--master_addr/--master_port)", fixed=True)

        # the call itself, plus what main needs before it
        args_out = [cst.Arg(_env("LOCAL_RANK"))]
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
            assign = self._last_assignment_in_block(outer, name)
            if assign is not None:
                self.plan.replace_node[assign.value] = _env(nprocs_role)
            else:
                before.append(parse_stmt(f'{name} = int(os.environ["{nprocs_role}"])\n'))
            ctx.report(call, "A2A404", f"{name} = torchrun's {nprocs_role}", fixed=True)
        new_line = line.with_changes(body=[line.body[0].with_changes(value=new_call)])
        if outer is not line:
            new_line = new_line.with_changes(leading_lines=outer.leading_lines)
        if before:
            new_line = new_line.with_changes(leading_lines=())
        self.plan.replace_stmt[outer] = before + [new_line]
        self.need_os = True
        self.spawn_rewritten = True
        nproc = self._nproc_value(sp, scope, spawn_line)
        ctx.report(call, "A2A401", f"mp.spawn -> {fn_name}(int(os.environ['LOCAL_RANK']), ...): launch with "
                   f"torchrun --nproc_per_node={nproc}", fixed=True)
        self._pre_spawn_code(line, scope)
        self._launch_note(line, nproc, master)
        self._local_index_as_rank(fdef, local_param, rank_worker)

    def _local_index_as_rank(self, fdef: cst.FunctionDef, local_param: str, rank_worker: Set[str]) -> None:
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
            hit = self._index_read_as_rank(func, param)
            if hit is not None:
                self._report_local_rank(hit, param, None if func is fdef else fdef.name.value)
                return
            for c in self._calls_in(func):
                callee = self._module_function(c.func)
                received = _parameter_receiving(c, callee, param) if callee is not None else None
                if received is not None:
                    todo.append((callee, received))  # type: ignore[arg-type]

    def _index_read_as_rank(self, func: cst.FunctionDef, param: str) -> Optional[cst.CSTNode]:
        """A `DistributedSampler(rank=param)` or a `param == 0` in `func`, if any."""
        for c in self._calls_in(func):
            if (dotted_name(c.func) or "").rpartition(".")[2] == "DistributedSampler":
                rank = next((a for a in c.args if a.keyword is not None and a.keyword.value == "rank"), None)
                if rank is not None and isinstance(rank.value, cst.Name) and rank.value.value == param:
                    return c
        for node in self.index.nodes:
            if type(node) is cst.Comparison and self.index.contains(func, node) and \
                    _compares_to_zero(node, param):  # type: ignore[arg-type]
                return node
        return None

    def _module_function(self, func: cst.BaseExpression) -> Optional[cst.FunctionDef]:
        """The module-level function of this module that a call of `func` (a plain name) runs."""
        if not isinstance(func, cst.Name):
            return None
        for f in self.index.functions:
            if f.name.value == func.value and isinstance(self.index.parent(f), cst.Module):
                return f
        return None

    def _report_local_rank(self, node: cst.CSTNode, local_param: str, handed_by: Optional[str] = None) -> None:
        origin = f" (the process index `{handed_by}` hands on)" if handed_by else ""
        self.ctx.report(node, "A2A412", f"`{local_param}`{origin} is torchrun's LOCAL_RANK now, the same on every "
                        "node: for sampler shards and rank-0 gates use `dist.get_rank()` (or RANK) when you run on "
                        "more than one node")

    def _init_call(self, c: cst.Call, rank_worker: Set[str], world_worker: Set[str]) -> bool:
        """Plan the env:// form of one init_process_group; False when torchrun's ranks cannot be matched (A2A409)."""
        ctx = self.ctx
        if ctx.suppressed(c, "A2A402") or any(a.star for a in c.args):
            return True
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
        self.plan.replace_node[c] = edit_args(c, drop=drop)
        names = ", ".join(a.keyword.value if a.keyword else ("init_method", "", "", "world_size", "rank")[c.args.index(a)]
                          for a in drop)
        ctx.report(c, "A2A402", f"init_process_group uses torchrun's env:// (dropped {names}); without torchrun, "
                   "set MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE", fixed=True)
        return True

    # -- helpers ------------------------------------------------------------------------------------------
    def _count_gate(self, line: cst.CSTNode, sp: "_Spawn") -> Optional[cst.If]:
        """The `if` around the spawn (in its function) that tests the process count it spawns, as in
        `if world_size > 1: mp.spawn(...) else: main(0, 1)`: under torchrun that count comes from
        WORLD_SIZE, which the test still reads the old way."""
        if sp.nprocs is None:
            return None
        counted = names_read(sp.nprocs.value)
        cur = self.parents.get(line)
        while cur is not None and not isinstance(cur, (cst.FunctionDef, cst.Module)):
            if isinstance(cur, cst.If) and counted & names_read(cur.test):
                return cur
            cur = self.parents.get(cur)
        return None

    def _function_passed_in(self, call: cst.Call, param: str) -> Optional[cst.FunctionDef]:
        """`def run_demo(demo_fn, ws): mp.spawn(demo_fn, ...)` called as `run_demo(demo_basic, ...)`: the
        module function every call site of the helper passes for `param` (None when it differs or is
        unknown). This is the shape of the PyTorch DDP tutorial."""
        helper = enclosing(call, self.parents, (cst.FunctionDef,))
        if helper is None or not isinstance(self.parents.get(self.parents.get(helper)), (cst.Module,)) and \
                not isinstance(self.parents.get(helper), cst.Module):
            return None
        names = [p.name.value for p in helper.params.params]
        if param not in names:
            return None
        index = names.index(param)
        passed: Set[str] = set()
        sites = 0
        for c in self.index.calls:
            if not (isinstance(c.func, cst.Name) and c.func.value == helper.name.value):
                continue
            sites += 1
            arg = next((a for a in c.args if a.keyword is not None and a.keyword.value == param), None)
            if arg is None:
                positional = [a for a in c.args if a.keyword is None]
                if any(a.star for a in positional) or index >= len(positional):
                    return None
                arg = positional[index]
            if not isinstance(arg.value, cst.Name):
                return None
            passed.add(arg.value.value)
        if sites == 0 or len(passed) != 1:
            return None
        return self.funcs.get(passed.pop())

    def _calls_in(self, node: cst.CSTNode) -> List[cst.Call]:
        """Every call in `node`'s subtree (itself included), in tree order, like `iter_calls(node)`;
        from the shared index (one pass over its calls and their ancestors), not a walk of the subtree."""
        if self._under is None:
            under: Dict[int, List[cst.Call]] = {}
            parents = self.index.parents
            for c in self.index.calls:
                under.setdefault(id(c), []).append(c)
                a = parents.get(id(c))
                while a is not None:
                    under.setdefault(id(a), []).append(c)
                    a = parents.get(id(a))
            self._under = under
        return self._under.get(id(node), [])

    def _assignments(self, scope: cst.CSTNode) -> List[cst.Assign]:
        """Assign statements inside `scope`, not descending into nested functions or classes (tree
        order); like `_assignments(scope)` but from the shared index."""
        if not isinstance(scope, (cst.Module, cst.FunctionDef)):
            return _assignments(scope)
        if self._owned is None:
            parents = self.index.parents
            owned: Dict[int, List[cst.Assign]] = {}
            seen: Set[int] = set()
            for p in parents.values():  # first appearance of each parent is in tree order
                if type(p) is not cst.Assign or id(p) in seen:
                    continue
                seen.add(id(p))
                owner = parents.get(id(p))
                while owner is not None and not isinstance(owner, (cst.FunctionDef, cst.ClassDef)):
                    owner = parents.get(id(owner))
                owned.setdefault(id(owner) if owner is not None else id(self.module), []).append(p)
            self._owned = owned
        return self._owned.get(id(scope), [])

    def _line(self, node: cst.CSTNode) -> int:
        pos = self.positions.get(node)
        return pos.start.line if pos is not None else 0

    def _reachable(self, fdef: cst.FunctionDef) -> List[cst.FunctionDef]:
        """fdef and the module-level functions it calls, transitively."""
        seen = [fdef]
        i = 0
        while i < len(seen) and len(seen) < 30:
            for c in self._calls_in(seen[i]):
                if isinstance(c.func, cst.Name) and c.func.value in self.funcs:
                    f = self.funcs[c.func.value]
                    if f not in seen:
                        seen.append(f)
            i += 1
        return seen

    def _master_target(self, stmt: cst.Assign) -> Optional[str]:
        if len(stmt.targets) != 1:
            return None
        t = stmt.targets[0].target
        if isinstance(t, cst.Subscript) and self.table.refers_to(t.value, "os.environ") and len(t.slice) == 1:
            el = t.slice[0].slice
            if isinstance(el, cst.Index):
                s = literal_string(el.value)
                if s in ("MASTER_ADDR", "MASTER_PORT"):
                    return s
        return None

    def _last_assignment_in_block(self, line: cst.SimpleStatementLine, name: str) -> Optional[cst.Assign]:
        """`name = ...` earlier in the same block as `line`, with no read of `name` in between."""
        block = self.parents.get(line)
        body = list(getattr(block, "body", []))
        if line not in body:
            return None
        idx = body.index(line)
        for stmt in reversed(body[:idx]):
            if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign):
                a = stmt.body[0]
                if len(a.targets) == 1 and isinstance(a.targets[0].target, cst.Name) and a.targets[0].target.value == name:
                    return a
            if name in names_read(stmt):
                return None
        return None

    def _nproc_value(self, sp: _Spawn, scope: cst.CSTNode, spawn_line: int) -> str:
        if sp.nprocs is None:
            return "1"
        v = literal_number(sp.nprocs.value)
        if v is not None:
            return str(int(v))
        code = code_of(sp.nprocs.value)
        if "device_count" in code:
            return "gpu"
        if isinstance(sp.nprocs.value, cst.Name):
            for stmt in self._assignments(scope):
                if self._line(stmt) < spawn_line and len(stmt.targets) == 1 and \
                        norm_code(stmt.targets[0].target) == sp.nprocs.value.value and "device_count" in code_of(stmt.value):
                    return "gpu"
        return "gpu"

    def _pre_spawn_code(self, line: cst.SimpleStatementLine, scope: cst.CSTNode) -> None:
        """Report statements before the spawn that ran once in the parent and now run in every rank."""
        work: List[cst.CSTNode] = []
        node: cst.CSTNode = line
        while node is not scope and node is not None:
            parent = self.parents.get(node)
            block = parent
            body = getattr(block, "body", None)
            if isinstance(body, (list, tuple)) and node in body and not (block is self.module):
                for stmt in body[:body.index(node)]:
                    if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                        continue
                    calls = [c for c in self._calls_in(stmt)]
                    names = {(c.func.attr.value if isinstance(c.func, cst.Attribute) else
                              c.func.value if isinstance(c.func, cst.Name) else "") for c in calls}
                    if names - BENIGN_CALLS - {""}:
                        work.append(stmt)
            node = parent
        if work:
            work.sort(key=self._line)
            lines = ", ".join(str(self._line(w)) for w in work)
            self.ctx.report(work[0], "A2A405", f"code before the old mp.spawn (line {lines}) now runs in every "
                            "torchrun process: guard downloads/dataset preparation with "
                            "`if int(os.environ['RANK']) == 0:` and a dist.barrier()")

    def _launch_note(self, line: cst.SimpleStatementLine, nproc: str, master: Dict[str, str]) -> None:
        path = self.ctx.path
        flags: List[str] = []
        node = self.parents.get(line)
        while node is not None:
            if isinstance(node, cst.If):
                d = dotted_name(node.test)
                if d and "." in d:
                    opt = self.argparse.get(d.split(".", 1)[1])
                    if opt and opt.get("action") == "store_true":
                        flags.append(opt["flag"])
            node = self.parents.get(node)
        tail = " ".join([path] + flags + ["..."])
        single = f"torchrun --standalone --nproc_per_node={nproc} {tail}"
        ws = self.argparse.get("world_size", {}).get("default")
        rk = self.argparse.get("rank", {}).get("default")
        url = self.argparse.get("dist_url", {}).get("default")
        nnodes = str(ws) if isinstance(ws, int) and ws > 0 else "<NNODES>"
        node_rank = str(rk) if isinstance(rk, int) and rk >= 0 else "<NODE_RANK>"
        addr, port = "<MASTER_ADDR>", master.get("MASTER_PORT", "<MASTER_PORT>")
        if isinstance(url, str):
            m = re.match(r"tcp://([^:/]+):(\d+)", url)
            if m:
                addr, port = m.group(1), m.group(2)
        multi = (f"torchrun --nnodes={nnodes} --node_rank={node_rank} --master_addr={addr} --master_port={port} "
                 f"--nproc_per_node={nproc} {tail}")
        note = {"path": path, "command": single, "multi_node": multi}
        if note not in self.ctx.launch_notes:  # spawns in both branches of an `if` launch the same way
            self.ctx.launch_notes.append(note)


def _assignments(scope: cst.CSTNode) -> List[cst.Assign]:
    """Assign statements inside `scope`, not descending into nested functions or classes."""
    out: List[cst.Assign] = []

    class V(Visitor):
        def visit_FunctionDef(self, n: cst.FunctionDef) -> bool:
            return n is scope

        def visit_ClassDef(self, n: cst.ClassDef) -> bool:
            return False

        def visit_Assign(self, n: cst.Assign) -> None:
            out.append(n)

    scope.visit(V())
    return out


def _is_rank_arithmetic(value: cst.BaseExpression, local: str) -> bool:
    """`X + local` / `local + X` where X does not involve `local` (node_rank * ngpus + local_index)."""
    if not (isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Add)):
        return False
    from .names import names_read
    for a, b in ((value.left, value.right), (value.right, value.left)):
        if isinstance(a, cst.Name) and a.value == local and local not in names_read(b) and not _has_effects(b):
            return True
    return False


def _parameter_receiving(call: cst.Call, callee: cst.FunctionDef, name: str) -> Optional[str]:
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


def _compares_to_zero(node: cst.Comparison, name: str) -> bool:
    """`name == 0` or `0 == name`."""
    if len(node.comparisons) != 1 or not isinstance(node.comparisons[0].operator, cst.Equal):
        return False
    a, b = node.left, node.comparisons[0].comparator
    return any(isinstance(x, cst.Name) and x.value == name and isinstance(y, cst.Integer) and y.value == "0"
               for x, y in ((a, b), (b, a)))


def _names_world_size(target: cst.BaseExpression, factor: cst.BaseExpression) -> bool:
    """Whether `target = factor * nprocs` reads as a world size (`args.world_size = ngpus * args.world_size`,
    `world = n_gpus * nnodes`) and not as a start rank (`start_rank = node_rank * ngpus`)."""
    t, f = code_of(target).lower(), code_of(factor).lower()
    if "rank" in t or "rank" in f:
        return False
    return "world" in t or "size" in t or "world" in f or "node" in f


_PURE_CALLS = {"int", "len", "min", "max", "float", "str", "abs", "getattr", "get", "getenv"}


def _has_effects(expr: cst.BaseExpression) -> bool:
    """Whether `expr` calls something that may do more than compute a value (`kwargs.pop("start_rank", 0)`):
    replacing it would drop that effect."""
    from .walk import iter_nodes
    return any(type(n) is cst.Call and (dotted_name(n.func) or "").rpartition(".")[2] not in _PURE_CALLS  # type: ignore[attr-defined]
               for n in iter_nodes(expr))


def _translate(code: str, mapping: Dict[str, str]) -> str:
    head, dot, rest = code.partition(".")
    return mapping.get(head, head) + dot + rest


def _is_param(node: cst.CSTNode, name: str, parents) -> bool:
    f = enclosing(node, parents, (cst.FunctionDef,))
    while f is not None:
        if any(p.name.value == name for p in f.params.params + f.params.kwonly_params):  # type: ignore[operator]
            return True
        f = enclosing(f, parents, (cst.FunctionDef,))
    return False


def _quote_like(node: cst.BaseExpression, text: str) -> str:
    q = "'" if isinstance(node, cst.SimpleString) and node.value.startswith("'") else '"'
    return f"{q}{text}{q}"


def _argparse_options(module: cst.Module) -> Dict[str, Dict]:
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
