"""The spawn site: what one mp.spawn call launches, and whether one torchrun launch can stand for it.

`analyse_spawn` reads the call (its worker, arguments, process count, the `if` around it) and either
reports why the spawn stays (A2A406, A2A407, A2A413) or returns a `SpawnSite` for the worker rewrite.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Set

import libcst as cst

from . import launch_facts, launch_job, launch_shapes
from .ancestors import enclosing
from .base import INFO, WARNING, rule
from .launch_exprs import is_param
from .launch_facts import INIT_PG, INIT_RPC
from .launch_notes import exclusive_mkdir, nproc_value, parent_signal_handler, rpc_world_count, slurm_launch
from .launch_state import LaunchState
from .names import arg_by, code_of, literal_string, names_read, norm_code

SPAWN = ("torch.multiprocessing.spawn", "torch.multiprocessing.spawn.spawn")
START_PROCESSES = ("torch.multiprocessing.start_processes", "torch.multiprocessing.spawn.start_processes")
# the rules of the edits one mp.spawn conversion makes together
SPAWN_EDIT_CODES = ("A2A401", "A2A402", "A2A403", "A2A404")


rule("A2A406", "spawn-manual", "mp.spawn call that cannot be converted automatically",
     fixes=False, severity=WARNING,
     why="""
join=False (the ProcessContext is used), a start method other than spawn, start_processes, a spawned
function defined in another module (or passed in as a parameter when the helper's call sites in this
file do not all pass the same function), a worker that joins the process group in the methods of a
class it creates, or a spawn whose result is used cannot be mapped to torchrun
mechanically. Nor can a spawn whose function joins the process group with a rank or world size that
apex2amp cannot match to torchrun's RANK / WORLD_SIZE (A2A409 names it): converting the launch but not
the init would start processes that disagree about their ranks, while the mp.spawn program still
works as it is. Nor can a spawn whose parent does what only one process may do: create the run's
folder with os.makedirs (no exist_ok), which every torchrun process would then race to create, or
install signal handlers (SLURM's preemption requeue), which torchrun's agent, the process the
scheduler signals, never runs. Nor can a spawn in a loop (each iteration was a fresh set of
processes joining a new process group or RPC world; torchrun starts one per command, and a second
init_process_group in the same process fails: one torchrun per value of the loop's variable).
Where the spawned function is another module's and pass 1 found its
init_process_group (SlowFast's launch_job(cfg, init_method, func) spawning mpu.run, called once per
phase), the finding names that file and line and the migration, by hand, both files together: call the
function with int(os.environ["LOCAL_RANK"]) and a copy of the config where the spawn was, then
torch.distributed.barrier(); join once through env:// (`if not torch.distributed.is_initialized():`),
since every phase now runs in the same torchrun processes; gate the caller's once-only code on RANK 0;
launch with the torchrun line it gives.""",
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
The spawned function never calls init_process_group nor rpc.init_rpc (directly or through functions of
this file), so this
spawn is process-level parallelism (data preparation, evaluation workers), not a distributed training
launch. It stays as it is.""",
     before="""
import torch.multiprocessing as mp


def preprocess_shard(i):
    convert(i)


if __name__ == "__main__":
    mp.spawn(preprocess_shard, nprocs=8)""",
     after="mp.spawn(preprocess_shard, nprocs=8)")


rule("A2A413", "spawn-init-in-other-module", "the spawned worker may join the process group in another module",
     fixes=False, severity=WARNING,
     why="""
The spawned function calls a function imported from another module of the project (a `setup(rank,
world_size)` or `init_distributed(args)` helper), and nothing in this file calls init_process_group.
That helper probably joins the process group (when pass 1 saw its init_process_group, the finding
names its file and line; a class of this file whose methods call the helper, or a name from a `from
<project module> import *`, counts too), so this is a distributed launch, but its rank, world size
and init_method are in another file, and converting only the launch would leave them fighting
torchrun's. Convert both by hand: call the worker with int(os.environ["LOCAL_RANK"]), let the
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


class SpawnCall:
    """What is known about one mp.spawn call."""

    def __init__(self, call: cst.Call):
        self.call = call
        self.fn = arg_by(call, 0, "fn")
        self.args = arg_by(call, 1, "args")
        self.nprocs = arg_by(call, 2, "nprocs")
        self.join = arg_by(call, 3, "join")
        self.daemon = arg_by(call, 4, "daemon")
        self.start_method = arg_by(call, 5, "start_method")


class SpawnSite:
    """One mp.spawn that a torchrun launch can stand for: its worker and how the spawn's values reach it."""

    def __init__(self, **fields):
        self.call: cst.Call = fields["call"]
        self.sp: SpawnCall = fields["sp"]
        self.line: cst.SimpleStatementLine = fields["line"]  # the statement holding the spawn
        self.outer: cst.BaseStatement = fields["outer"]  # the statement the torchrun call replaces
        self.fn_name: str = fields["fn_name"]
        self.fdef: cst.FunctionDef = fields["fdef"]
        self.reach: List[cst.FunctionDef] = fields["reach"]
        self.inits: List[cst.Call] = fields["inits"]
        self.params: List[str] = fields["params"]
        self.local_param: str = fields["local_param"]
        self.elements: Optional[List[cst.BaseExpression]] = fields["elements"]
        self.star: Optional[cst.BaseExpression] = fields["star"]
        self.mapping: Dict[str, str] = fields["mapping"]  # main-side Name -> worker param
        self.scope: cst.CSTNode = fields["scope"]
        self.spawn_line: int = fields["spawn_line"]
        self.nprocs_code: str = fields["nprocs_code"]
        # the worker joins an RPC world (rpc.init_rpc) and no process group: its index is the global RANK
        self.rpc_world: bool = fields.get("rpc_world", False)


def analyse_spawn(state: LaunchState, call: cst.Call) -> Optional[SpawnSite]:
    """The site of `call` when one torchrun launch can stand for it; otherwise reported, and None."""
    ctx = state.ctx
    if not ctx.enabled("A2A401") or ctx.suppressed(call, "A2A401"):
        return None
    off = [c for c in SPAWN_EDIT_CODES if not ctx.enabled(c)]
    if off:  # the spawn's edits are one migration: none of them, or all
        ctx.report(call, "A2A406", f"mp.spawn left as it is: its migration also needs {', '.join(off)}, "
                   "which this run's selection leaves out")
        return None
    sp = SpawnCall(call)
    expr_parent = state.parents.get(call)
    line = state.parents.get(expr_parent) if isinstance(expr_parent, cst.Expr) else None
    if any(a.star for a in call.args) or sp.fn is None:
        ctx.report(call, "A2A406", "mp.spawn with */** arguments: call the worker with "
                   "int(os.environ['LOCAL_RANK']) and launch with torchrun by hand")
        return None
    fn_name = sp.fn.value.value if isinstance(sp.fn.value, cst.Name) else None
    fdef = state.funcs.get(fn_name) if fn_name else None
    if fdef is None and fn_name and is_param(call, fn_name, state.parents):
        fdef = function_passed_in(state, call, fn_name)
    if fdef is None:
        hit = None if fn_name and is_param(call, fn_name, state.parents) else launch_facts.entry_for(state, sp.fn.value)
        if hit is not None:
            report_spawn_of_joining_function(state, sp, line, hit)
            return None
        where = "passed in as a parameter" if fn_name and is_param(call, fn_name, state.parents) else \
            "defined in another module or not a plain function"
        ctx.report(call, "A2A406", f"the spawned function is {where}: call it with "
                   "int(os.environ['LOCAL_RANK']) (plus its args) where the spawn was, make its "
                   "init_process_group use env://, and launch with torchrun")
        return None
    reach = state.reachable(fdef)
    inits = [c for f in reach for c in state.calls_in(f) if state.table.refers_to(c.func, *INIT_PG)]
    rpc_world = False
    if not inits:
        rpcs = [c for f in reach for c in state.calls_in(f) if state.table.refers_to(c.func, *INIT_RPC)]
        if rpcs:
            loop = launch_shapes.loop_around(call, state.parents)
            scope_of_call = enclosing(call, state.parents, (cst.FunctionDef,)) or state.module
            if loop is not None:
                ctx.report(call, "A2A406", f"{fn_name} joins an RPC world (rpc.init_rpc at line "
                           f"{state.line(rpcs[0])}) and this spawn sits in a loop (line {state.line(loop)}): each "
                           "iteration starts a new world of fresh processes, while torchrun starts one world per "
                           "command, and a process cannot join a second one after rpc.shutdown(). Make the loop's "
                           "variable a command-line option and run one `torchrun --standalone "
                           f"--nproc_per_node={rpc_world_count(state, sp, scope_of_call, state.line(call))} {ctx.path} ...` "
                           "per value, "
                           f"with {fn_name}(int(os.environ['RANK']), ...) where the spawn was and no "
                           "MASTER_ADDR/MASTER_PORT assignments")
                return None
            inits, rpc_world = rpcs, True
    if not inits:
        calls = [c for f in reach for c in state.calls_in(f)]
        calls += launch_facts.local_class_calls(state, calls)  # `Trainer(rank)` whose __init__ calls a helper
        joining = launch_facts.joining_callees(state, calls)
        if joining:
            qual, entry = joining[0]
            ctx.report(call, "A2A413", f"{fn_name} joins the process group through {qual}, in another module "
                       f"(its init_process_group is at {launch_facts.where(entry)}: `{entry.get('init')}`): this "
                       "spawn and that init_process_group are one migration, which apex2amp does not write across "
                       f"two files, so both stay. By hand: call {fn_name}(int(os.environ['LOCAL_RANK']), ...) "
                       "where the spawn was, make that init_process_group read env:// (no init_method/rank/"
                       "world_size, no MASTER_ADDR/PORT; torchrun's RANK / WORLD_SIZE replace them), and launch "
                       f"with torchrun --nproc_per_node={nproc_value(state, sp, state.module, 0)} {ctx.path} ...")
            return None
        params_ = {p.name.value for f in reach for p in f.params.params}
        foreign = launch_shapes.foreign_callees(calls, state.table, set(state.funcs))
        foreign += [q for q in launch_facts.library_joiners(state, calls) if q not in foreign]
        foreign += launch_facts.unresolved_callees(state, calls, params_)
        if foreign:
            ctx.report(call, "A2A413", f"{fn_name} calls {', '.join(foreign[:3])} from another module, which "
                       "may call init_process_group (this file cannot show it): if it does, call "
                       f"{fn_name}(int(os.environ['LOCAL_RANK']), ...) where the spawn was, make that "
                       "init_process_group read env:// (no init_method/rank/world_size, no MASTER_ADDR/PORT), "
                       f"and launch with torchrun --nproc_per_node={nproc_value(state, sp, state.module, 0)} "
                       f"{ctx.path} ...")
            return None
        held = class_joining(state, reach)
        if held is not None:
            ctx.report(call, "A2A406", f"{fn_name} creates {held.name.value}, whose code calls "
                       "init_process_group (methods are not followed): call the worker with "
                       "int(os.environ['LOCAL_RANK']), make that init_process_group read env:// (no "
                       "init_method/rank/world_size), and launch with torchrun "
                       f"--nproc_per_node={nproc_value(state, sp, state.module, 0)} {ctx.path} ...")
            return None
        ctx.report(call, "A2A407", f"{fn_name} never calls init_process_group: this spawn is not a "
                   "distributed launch and stays")
        return None
    loop = launch_shapes.loop_around(call, state.parents)
    if loop is not None and not rpc_world:
        ctx.report(call, "A2A406", f"this spawn sits in a loop (line {state.line(loop)}): each iteration started "
                   f"fresh processes that joined a new process group; under torchrun {fn_name} would run "
                   "several times in the same processes, and a second init_process_group fails (the default "
                   "group is already initialized) or joins with the state the first left. Make the loop's "
                   "variable a command-line option and run one torchrun per value, or convert by hand")
        return None
    if sp.join is not None and not (isinstance(sp.join.value, cst.Name) and sp.join.value.value == "True"):
        ctx.report(call, "A2A406", "mp.spawn(join=False): the ProcessContext is used; convert to torchrun by hand")
        return None
    if sp.start_method is not None and literal_string(sp.start_method.value) != "spawn":
        ctx.report(call, "A2A406", "mp.spawn with a custom start_method: torchrun starts processes itself; "
                   "convert by hand")
        return None
    if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
        ctx.report(call, "A2A406", "the result of mp.spawn is used: convert to torchrun by hand")
        return None
    gate = count_gate(state, line, sp)
    params = [p.name.value for p in fdef.params.params]
    outer: cst.BaseStatement = line  # the statement the torchrun call replaces
    twin_gate = gate if gate is not None else launch_shapes.device_count_gate(line, state.parents)
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
        return None
    if not params or fdef.params.posonly_params:
        ctx.report(call, "A2A406", f"{fn_name} takes no positional process index; convert by hand")
        return None
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
    scope = enclosing(call, state.parents, (cst.FunctionDef,)) or state.module
    mkdir = exclusive_mkdir(state, line, scope)
    if mkdir is not None:
        ctx.report(call, "A2A406", f"the code before the spawn creates a folder at line {state.line(mkdir)} "
                   f"(`{code_of(mkdir.func)}` without exist_ok=True): it ran once, in the parent; under torchrun "
                   "every process runs it at once, and all but the first would fail (FileExistsError) or pick "
                   "a folder of their own. Create it once (`if int(os.environ['RANK']) == 0:` plus a "
                   "dist.barrier() after init_process_group, or exist_ok=True on a name every rank computes "
                   "the same), then convert the launch")
        return None
    handler = parent_signal_handler(state, line, scope)
    if handler is not None:
        ctx.report(call, "A2A406", f"the code before the spawn installs a signal handler at line {state.line(handler)} "
                   f"(`{' '.join(code_of(handler).split())}`): it ran in the parent, the process the scheduler "
                   "signals (SLURM's preemption signal, to requeue the job); under torchrun that process is "
                   "torchrun's agent, which never runs it, so the job would no longer requeue. Handle the signal "
                   "in the workers (rank 0 requeues) or in the batch script, then convert the launch"
                   + slurm_launch(state, line, scope))
        return None
    spawn_line = state.line(call)
    nprocs_code = norm_code(sp.nprocs.value) if sp.nprocs is not None else "1"
    return SpawnSite(call=call, sp=sp, line=line, outer=outer, fn_name=fn_name, fdef=fdef, reach=reach,
                     inits=inits, params=params, local_param=local_param, elements=elements, star=star,
                     mapping=mapping, scope=scope, spawn_line=spawn_line, nprocs_code=nprocs_code,
                     rpc_world=rpc_world)


def count_gate(state: LaunchState, line: cst.CSTNode, sp: SpawnCall) -> Optional[cst.If]:
    """The `if` around the spawn (in its function) that tests the process count it spawns, as in
    `if world_size > 1: mp.spawn(...) else: main(0, 1)`: under torchrun that count comes from
    WORLD_SIZE, which the test still reads the old way."""
    if sp.nprocs is None:
        return None
    counted = names_read(sp.nprocs.value)
    cur = state.parents.get(line)
    while cur is not None and not isinstance(cur, (cst.FunctionDef, cst.Module)):
        if isinstance(cur, cst.If) and counted & names_read(cur.test):
            return cur
        cur = state.parents.get(cur)
    return None


def function_passed_in(state: LaunchState, call: cst.Call, param: str) -> Optional[cst.FunctionDef]:
    """`def run_demo(demo_fn, ws): mp.spawn(demo_fn, ...)` called as `run_demo(demo_basic, ...)`: the
    module function every call site of the helper passes for `param` (None when it differs or is
    unknown). This is the shape of the PyTorch DDP tutorial."""
    helper = enclosing(call, state.parents, (cst.FunctionDef,))
    if helper is None or not isinstance(state.parents.get(state.parents.get(helper)), (cst.Module,)) and \
            not isinstance(state.parents.get(helper), cst.Module):
        return None
    names = [p.name.value for p in helper.params.params]
    if param not in names:
        return None
    index = names.index(param)
    passed: Set[str] = set()
    sites = 0
    for c in state.index.calls:
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
    return state.funcs.get(passed.pop())


def class_joining(state: LaunchState, reach: List[cst.FunctionDef]) -> Optional[cst.ClassDef]:
    """A class of this module that the worker (or a helper it calls) instantiates and whose code calls
    init_process_group: `trainer = Trainer(rank, world_size)` with the init in `Trainer.__init__`."""
    classes = {s.name.value: s for s in state.module.body if isinstance(s, cst.ClassDef)}
    for f in reach:
        for c in state.calls_in(f):
            cls = classes.get(c.func.value) if isinstance(c.func, cst.Name) else None
            if cls is not None and any(state.table.refers_to(i.func, *INIT_PG) for i in state.calls_in(cls)):
                return cls
    return None


def report_spawn_of_joining_function(state: LaunchState, sp: SpawnCall, line: Optional[cst.CSTNode], hit) -> None:
    """A2A406 for `mp.spawn(mpu.run, ...)` where pass 1 found that `mpu.run`, a function of another
    module, joins the process group: name that init_process_group and the migration file by file
    (launch_job.message)."""
    qual, entry = hit
    gate = count_gate(state, line, sp) if line is not None else None
    holder = enclosing(sp.call, state.parents, cst.FunctionDef)
    state.ctx.report(sp.call, "A2A406", launch_job.message(
        sp, code_of(sp.fn.value), qual, launch_facts.where(entry), entry, nproc_value(state, sp, state.module, 0),
        code_of(gate.test) if gate is not None else None, holder.name.value if holder is not None else None))
