"""The finding for a spawn of another module's joining function: SlowFast's `launch_job(cfg, init_method,
func)` helper spawning `mpu.run`, whose init_process_group is in another file, called by run_net once per
phase (train, then each test view, then visualisation).

apex2amp does not write that migration: it spans the spawn's file and the init's file (both or neither),
and whether the rest of the caller (code between the phases, which ran once in the parent) may run in
every torchrun process is the caller's, a third file. The finding spells out the migration, the one
fixtures/runnable_launch_job/migrated is (run under torchrun --nproc-per-node 2 against the mp.spawn
original by tests/test_launch_job_runnable.py, records per phase, rank and step equal):

- the spawn becomes a call of the function in this process, LOCAL_RANK for the process index, with a
  copy of the config (mp.spawn pickled it: a phase's changes to it never reached the next phase),
  followed by `torch.distributed.barrier()` (mp.spawn returned when every process of the phase had
  ended: the next phase may read what this one wrote, such as the checkpoint the test loads);
- the init joins once, through env:// (`if not torch.distributed.is_initialized():`), so the second and
  later phases reuse the group torchrun's processes joined in the first;
- one torchrun launch for the whole script.
"""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple

import libcst as cst

from .names import code_of

# init_process_group's arguments torchrun's env:// stands for
_ENV_KWARGS = ("init_method", "world_size", "rank", "store")
_LOCAL_RANK = 'int(os.environ["LOCAL_RANK"])'


def env_init(init: str) -> Optional[str]:
    """`init_process_group(backend=...)` from the published text of the call (`entry["init"]`), keeping
    what env:// does not replace (the backend, a timeout); None when the text is cut or unusual."""
    try:
        call = cst.parse_expression(init)
    except cst.ParserSyntaxError:
        return None
    if not isinstance(call, cst.Call) or any(a.star for a in call.args):
        return None
    kept: List[str] = []
    for i, a in enumerate(call.args):
        name = a.keyword.value if a.keyword is not None else ("backend", "init_method", "timeout", "world_size",
                                                              "rank")[i] if i < 5 else None
        if name is None:
            return None
        if name not in _ENV_KWARGS:
            kept.append(f"{name}={code_of(a.value)}")
    return f"{code_of(call.func)}({', '.join(kept)})"


def _call_args(sp) -> Optional[List[cst.BaseExpression]]:
    """The elements of the spawn's `args=(...)` tuple (none: `()`), or None when not a literal tuple."""
    if sp.args is None:
        return []
    value = sp.args.value
    if isinstance(value, cst.Tuple) and not any(isinstance(e, cst.StarredElement) for e in value.elements):
        return [e.value for e in value.elements]
    return None


def _config_args(args: List[cst.BaseExpression], spawn: cst.Call) -> List[str]:
    """The names handed to the spawn whose attributes it reads (`cfg` of `cfg.NUM_GPUS`, `cfg.SHARD_ID`):
    the config object each spawned process had its own pickled copy of."""
    bases = {code_of(n.value) for n in _attributes(spawn) if isinstance(n.value, cst.Name)}
    return [a.value for a in args if isinstance(a, cst.Name) and a.value in bases]


def _attributes(node: cst.CSTNode) -> List[cst.Attribute]:
    out: List[cst.Attribute] = []

    class _V(cst.CSTVisitor):
        def visit_Attribute(self, n: cst.Attribute) -> None:
            out.append(n)

    node.visit(_V())
    return out


def nproc_text(sp, default: str) -> str:
    """--nproc_per_node's value: `default` (a literal, or `gpu` for a device count), the spawn's own count
    where that is a config value (`<cfg.NUM_GPUS>`: the count the config asks for, checked against
    WORLD_SIZE, which all the GPUs need not be)."""
    if sp.nprocs is None or default != "gpu":
        return default
    code = code_of(sp.nprocs.value)
    return default if "device_count" in code else f"<{code}>"


_NODES = re.compile(r"num_shards|n_?nodes|num_nodes|world_nodes", re.IGNORECASE)
_NODE_RANK = re.compile(r"shard_id|node_rank|node_id|machine_rank", re.IGNORECASE)


def _node_values(args: Optional[List[cst.BaseExpression]]) -> Tuple[str, str]:
    """--nnodes / --node_rank's values: the spawn's arguments that name them (`cfg.NUM_SHARDS`,
    `cfg.SHARD_ID`: the config keeps reading them, so torchrun's must be the same), else placeholders."""
    nodes, node_rank = "<NNODES>", "<NODE_RANK>"
    for a in args or []:
        code = code_of(a)
        tail = code.rpartition(".")[2]
        if _NODES.fullmatch(tail) and nodes.startswith("<N"):
            nodes = f"<{code}>"
        elif _NODE_RANK.fullmatch(tail) and node_rank.startswith("<N"):
            node_rank = f"<{code}>"
    return nodes, node_rank


def message(sp, fn_code: str, qual: str, where: str, entry: Dict[str, object], nproc: str,
            gate: Optional[str], holder: Optional[str]) -> str:
    """The A2A406 text: what blocks, and the migration by hand, file by file, with the torchrun line."""
    init = str(entry.get("init"))
    nproc = nproc_text(sp, nproc)
    args = _call_args(sp)
    copies = _config_args(args, sp.call) if args is not None else []
    if args is not None:
        shown = [f"copy.deepcopy({code_of(a)})" if isinstance(a, cst.Name) and a.value in copies else code_of(a)
                 for a in args]
        call = f"{fn_code}({', '.join([_LOCAL_RANK] + shown)})"
    else:
        call = f"{fn_code}({_LOCAL_RANK}, *<the spawn's args>)"
    nodes, node_rank = _node_values(args)
    joined = env_init(init) or "init_process_group(<its backend>)"
    in_fn = f" `{holder}`" if holder else " the function holding this spawn"
    copy_note = (f" (mp.spawn pickled {', '.join(copies)}: a phase's changes to it must not reach the next)"
                 if copies else "")
    imports = " and copy" if copies else ""
    daemon = "; drop daemon=" if sp.daemon is not None else ""
    text = (f"the spawned function {fn_code} is {qual}, defined in another module, which joins the process group "
            f"at {where} (`{init}`): this spawn and that init_process_group are one migration across two files, "
            "which apex2amp does not write, so both stay. Under torchrun the processes start once and every call "
            f"of{in_fn} (one per phase: training, then testing, ...) runs in them in sequence; by hand, both files "
            f"together: (1) here, replace the spawn with `{call}`{copy_note}, then "
            "`torch.distributed.barrier()` (mp.spawn returned when every process had ended: the next phase may "
            f"read what this one wrote){daemon}; import os{imports} where missing; (2) at {where}, join once "
            f"through env://: `if not torch.distributed.is_initialized(): {joined}` (torchrun's RANK / WORLD_SIZE "
            "replace the rank and world size it computes from the process index: raise where they differ, a "
            "torchrun line that disagrees with the config); (3) in the script calling it, code the parent ran once between or after these "
            "calls now runs in every process: gate it on RANK == 0; (4) launch: torchrun --standalone "
            f"--nproc_per_node={nproc} <the script> <its args>; multi-node, on each node: torchrun "
            f"--nnodes={nodes} --node_rank={node_rank} --master_addr=<HOST> --master_port=<PORT> "
            f"--nproc_per_node={nproc} <the script> <its args>.")
    if gate is not None:
        text += (f" The spawn runs only when `{gate}`, a test of the process count torchrun sets: the other "
                 "branch stays the single-process path (torchrun --nproc_per_node=1).")
    return text
