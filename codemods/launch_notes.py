"""What a converted launch tells its user: the torchrun command, the process count, code that now runs in every rank.

The torchrun line of each converted spawn goes to `ctx.launch_notes` (migrate/launch_torchrun.py rewrites
the run's launch files with it, A2A420); the launch-file rules A2A410 / A2A411 are applied by
migrate/launch_scripts.py.
"""
from __future__ import annotations

import re
from typing import Dict, List, Optional

import libcst as cst

from .base import FIX, INFO, WARNING, rule
from .launch_state import LaunchState
from .names import code_of, dotted_name, literal_number, literal_string, norm_code
from .walk import iter_nodes

BENIGN_CALLS = {
    "parse_args", "parse_known_args", "add_argument", "add_argument_group", "ArgumentParser", "warn", "seed",
    "manual_seed", "manual_seed_all", "device_count", "is_available", "int", "str", "float", "bool", "len",
    "get", "getenv", "print", "format", "join", "split", "vars", "setdefault", "basicConfig", "getLogger",
    "info", "debug", "set_start_method", "use_deterministic_algorithms", "range", "list", "dict", "tuple",
}


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


def nproc_value(state: LaunchState, sp, scope: cst.CSTNode, spawn_line: int) -> str:
    if sp.nprocs is None:
        return "1"
    v = literal_number(sp.nprocs.value)
    if v is not None:
        return str(int(v))
    code = code_of(sp.nprocs.value)
    if "device_count" in code:
        return "gpu"
    if isinstance(sp.nprocs.value, cst.Name):
        for stmt in state.assignments(scope):
            if state.line(stmt) < spawn_line and len(stmt.targets) == 1 and \
                    norm_code(stmt.targets[0].target) == sp.nprocs.value.value and "device_count" in code_of(stmt.value):
                return "gpu"
    return "gpu"


def statements_before(state: LaunchState, line: cst.CSTNode, scope: cst.CSTNode) -> List[cst.BaseStatement]:
    """The statements of `scope` that run before `line` (in its block and the blocks around it; not
    function or class definitions, not the module's top level)."""
    out: List[cst.BaseStatement] = []
    node: cst.CSTNode = line
    while node is not scope and node is not None:
        parent = state.parents.get(node)
        body = getattr(parent, "body", None)
        if isinstance(body, (list, tuple)) and node in body and not (parent is state.module):
            out.extend(s for s in body[:body.index(node)] if not isinstance(s, (cst.FunctionDef, cst.ClassDef)))
        node = parent
    return out


def pre_spawn_code(state: LaunchState, line: cst.SimpleStatementLine, scope: cst.CSTNode) -> None:
    """Report statements before the spawn that ran once in the parent and now run in every rank."""
    work: List[cst.CSTNode] = []
    for stmt in statements_before(state, line, scope):
        calls = [c for c in state.calls_in(stmt)]
        names = {(c.func.attr.value if isinstance(c.func, cst.Attribute) else
                  c.func.value if isinstance(c.func, cst.Name) else "") for c in calls}
        if names - BENIGN_CALLS - {""}:
            work.append(stmt)
    if work:
        work.sort(key=state.line)
        lines = ", ".join(str(state.line(w)) for w in work)
        state.ctx.report(work[0], "A2A405", f"code before the old mp.spawn (line {lines}) now runs in every "
                         "torchrun process: guard downloads/dataset preparation with "
                         "`if int(os.environ['RANK']) == 0:` and a dist.barrier()")


def slurm_names(state: LaunchState, line: cst.CSTNode, scope: cst.CSTNode) -> List[str]:
    """The SLURM_* variables the code before the spawn reads (a rank or world size taken from SLURM)."""
    out: List[str] = []
    for stmt in statements_before(state, line, scope):
        for node in iter_nodes(stmt):
            if type(node) is cst.SimpleString:
                text = literal_string(node) or ""  # type: ignore[arg-type]
                if text.startswith("SLURM_") and text.isidentifier() and text not in out:
                    out.append(text)
    return out


def slurm_launch(state: LaunchState, line: cst.CSTNode, scope: cst.CSTNode) -> str:
    """For a rank taken from SLURM (`SLURM_NODEID * ngpus + gpu`): the torchrun launch with the same ranks."""
    names = slurm_names(state, line, scope)
    if not {"SLURM_NODEID", "SLURM_NNODES", "SLURM_PROCID", "SLURM_JOB_NUM_NODES"} & set(names):
        return ""
    return (f". The rank and world size came from SLURM ({', '.join(names)}): the same ranks come from one "
            "`srun --ntasks-per-node=1 torchrun --nnodes=$SLURM_NNODES --node_rank=$SLURM_NODEID "
            "--nproc_per_node=gpu --master_addr=<first host of $SLURM_JOB_NODELIST> --master_port=<the old port> "
            f"{state.ctx.path} ...` per job (RANK = SLURM_NODEID * processes per node + LOCAL_RANK)")


def parent_signal_handler(state: LaunchState, line: cst.CSTNode, scope: cst.CSTNode) -> Optional[cst.Call]:
    """A `signal.signal(...)` before the spawn: the handler ran in the parent, the process the scheduler
    signals (SLURM's preemption SIGUSR1 / SIGTERM, to requeue the job); under torchrun that process is
    torchrun's agent, which never runs it, and each worker would install it for itself."""
    for stmt in statements_before(state, line, scope):
        for c in state.calls_in(stmt):
            if state.table.refers_to(c.func, "signal.signal"):
                return c
    return None


def rpc_world_count(state: LaunchState, sp, scope: cst.CSTNode, spawn_line: int) -> str:
    """The number of processes an RPC world spawns: its roles go by rank, so the count is the program's
    (a literal, `world_size = 2` before the spawn, an argparse default), never the GPU count."""
    v = literal_number(sp.nprocs.value) if sp.nprocs is not None else 1
    if v is not None:
        return str(int(v))
    if isinstance(sp.nprocs.value, cst.Name):
        found = None
        for stmt in state.assignments(scope):
            if state.line(stmt) < spawn_line and len(stmt.targets) == 1 and \
                    norm_code(stmt.targets[0].target) == sp.nprocs.value.value:
                found = literal_number(stmt.value)
        if found is not None:
            return str(int(found))
    d = dotted_name(sp.nprocs.value) or ""
    if d.count(".") == 1:
        default = state.argparse.get(d.split(".")[1], {}).get("default")
        if isinstance(default, int) and default > 0:
            return str(default)
    return "N"


def launch_note(state: LaunchState, line: cst.SimpleStatementLine, nproc: str, master: Dict[str, str],
                rpc: bool = False) -> None:
    path = state.ctx.path
    flags: List[str] = []
    node = state.parents.get(line)
    while node is not None:
        if isinstance(node, cst.If):
            d = dotted_name(node.test)
            if d and "." in d:
                opt = state.argparse.get(d.split(".", 1)[1])
                if opt and opt.get("action") == "store_true":
                    flags.append(opt["flag"])
        node = state.parents.get(node)
    tail = " ".join([path] + flags + ["..."])
    single = f"torchrun --standalone --nproc_per_node={nproc} {tail}"
    ws = state.argparse.get("world_size", {}).get("default")
    rk = state.argparse.get("rank", {}).get("default")
    url = state.argparse.get("dist_url", {}).get("default")
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
    if rpc:  # one RPC world of `nproc` processes with roles by rank: no per-node form of the old launch
        note = {"path": path, "command": single}
    if note not in state.ctx.launch_notes:  # spawns in both branches of an `if` launch the same way
        state.ctx.launch_notes.append(note)


def exclusive_mkdir(state: LaunchState, line: cst.CSTNode, scope: cst.CSTNode) -> Optional[cst.Call]:
    """An `os.makedirs(d)` / `os.mkdir(d)` / `path.mkdir()` before the spawn without `exist_ok=True`:
    run once in the parent it made the run's folder; in every torchrun process at once all but the
    first fail (FileExistsError), or each picks a folder of its own when the name counts existing runs."""
    for stmt in statements_before(state, line, scope):
        for c in state.calls_in(stmt):
            name = dotted_name(c.func) or ""
            if name in ("os.makedirs", "os.mkdir") or name.endswith(".mkdir") and name != "os.mkdir":
                ok = next((a for a in c.args if a.keyword is not None and a.keyword.value == "exist_ok"), None)
                if ok is None or not (isinstance(ok.value, cst.Name) and ok.value.value == "True"):
                    return c
    return None
