"""Run one side of a verification: launch the program with the probe, collect its per-rank records."""
from __future__ import annotations

import functools
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from . import zygote

SHIM_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shim")
PROBE_DIR = os.path.join(SHIM_DIR, "probe")
APEX_EMULATION_DIR = os.path.join(SHIM_DIR, "apex_emulation")


@dataclass
class SideRun:
    """What one side produced: records per rank, crash/end events, exit code and the output tail."""
    records: Dict[int, List[dict]]
    events: List[dict] = field(default_factory=list)
    returncode: Optional[int] = None
    output: str = ""
    command: List[str] = field(default_factory=list)
    timed_out: bool = False
    apex: str = "none"  # "real", "emulated" or "none"

    def error(self) -> Optional[str]:
        """The first crash message recorded, if any."""
        for e in self.events:
            if e.get("event") == "crash" and e.get("error"):
                return e["error"]
        return None


def free_port() -> int:
    """An unused TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@functools.lru_cache(maxsize=None)
def real_apex_available() -> bool:
    """True when `import apex.amp` works in a fresh interpreter (then the emulation is not used)."""
    try:
        r = subprocess.run([sys.executable, "-c", "import apex.amp"], capture_output=True, timeout=120)
        return r.returncode == 0
    except Exception:
        return False


def cuda_available() -> bool:
    """True when torch sees a CUDA device (decides --device auto); cheap answer when no NVIDIA driver exists."""
    if not (os.path.exists("/dev/nvidiactl") or shutil.which("nvidia-smi")):
        return False
    try:
        import torch
        return bool(torch.cuda.is_available())
    except Exception:
        return False


def uses_spawn(source: str) -> bool:
    """The program launches its own workers with torch.multiprocessing.spawn."""
    return bool(re.search(r"\b(mp|multiprocessing)\.spawn\s*\(|\bspawn\s*\(\s*(fn\s*=\s*)?\w+\s*,", source))


def reads_torchrun_env(source: str) -> bool:
    """The program reads torchrun's LOCAL_RANK (or relies on env:// rendezvous)."""
    return "LOCAL_RANK" in source or "env://" in source


def detect_launcher(original_entry: str, migrated_entry: str, nproc: Optional[int]) -> str:
    """'torchrun' for the migrated side when the migration moved mp.spawn to torchrun, or --nproc is given."""
    def read(p):
        try:
            with open(p, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""
    migrated = read(migrated_entry)
    if nproc:
        return "torchrun" if not uses_spawn(migrated) else "python"
    if uses_spawn(read(original_entry)) and not uses_spawn(migrated) and reads_torchrun_env(migrated):
        return "torchrun"
    return "python"


def _read_records(out_dir: str):
    by_rank: Dict[int, List[dict]] = {}
    events: List[dict] = []
    for name in sorted(os.listdir(out_dir)):
        if not name.endswith(".jsonl"):
            continue
        with open(os.path.join(out_dir, name), encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if "event" in obj:
                    events.append(obj)
                else:
                    obj["losses"] = [float(v) for v in obj.get("losses", [])]
                    by_rank.setdefault(int(obj["rank"]), []).append(obj)
    for rank in by_rank:
        by_rank[rank].sort(key=lambda r: r["it"])
    return dict(sorted(by_rank.items())), events


def run_side(folder: str, entry: str, args: Sequence[str] = (), *, steps: int = 10, nproc: Optional[int] = None,
             launcher: str = "python", device: str = "cpu", seed: int = 0, timeout: float = 600.0,
             apex: Optional[str] = None, cwd: Optional[str] = None,
             extra_env: Optional[Dict[str, str]] = None, find_nan: bool = False) -> SideRun:
    """Run `folder/entry ARGS` under the probe for `steps` optimizer steps; returns its SideRun.

    The program runs in a fresh temp folder, or in `cwd` (kept: a resume's two legs share it);
    `extra_env` adds probe settings such as APEX2AMP_CUT_AT_SAVE. find_nan: trace non-finite values from
    the first step (otherwise from the first non-finite/skipped one).
    """
    folder = os.path.abspath(folder)
    script = os.path.join(folder, entry)
    if not os.path.isfile(script):
        raise FileNotFoundError("entry script not found: %s" % script)
    if apex is None:
        apex = "real" if real_apex_available() else "emulated"
    out_dir = tempfile.mkdtemp(prefix="apex2amp-records-")
    work_dir = cwd or tempfile.mkdtemp(prefix="apex2amp-cwd-")
    procs = nproc or 1
    env = dict(os.environ)
    path = [PROBE_DIR] + ([APEX_EMULATION_DIR] if apex == "emulated" else []) + [folder]
    if env.get("PYTHONPATH"):
        path.append(env["PYTHONPATH"])
    env.update({
        "PYTHONPATH": os.pathsep.join(path),
        "APEX2AMP_OUT": out_dir, "APEX2AMP_STEPS": str(steps), "APEX2AMP_SEED": str(seed),
        "APEX2AMP_DEVICE": device, "APEX2AMP_NPROC": str(procs), "APEX2AMP_MASTER_PORT": str(free_port()),
        "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0", "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
        "PYTHONUNBUFFERED": "1", "APEX2AMP_FIND_NAN": "1" if find_nan else "0",
    })
    env.update(extra_env or {})
    if launcher == "torchrun":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=%d" % procs, "--nnodes=1",
               "--master_addr=127.0.0.1", "--master_port=%d" % free_port(), script] + list(args)
    else:
        cmd = [sys.executable, script] + list(args)
    timed_out = False
    forked = None
    if launcher != "torchrun" and zygote.enabled() and not _starts_workers(script):
        forked = zygote.run(script, args, work_dir, env, timeout)
    if forked is not None:
        rc, output, timed_out = forked
    else:
        rc, output, timed_out = _run_fresh(cmd, work_dir, env, timeout)
    records, events = _read_records(out_dir)
    shutil.rmtree(out_dir, ignore_errors=True)
    if cwd is None:
        shutil.rmtree(work_dir, ignore_errors=True)
    return SideRun(records=records, events=events, returncode=rc, output=output, command=cmd,
                   timed_out=timed_out, apex=apex)


def collect_losses(folder: str, entry: str, args: Sequence[str] = (), steps: int = 10, nproc: Optional[int] = None,
                   launcher: str = "python", device: str = "cpu", seed: int = 0,
                   timeout: float = 600.0) -> Dict[int, List[dict]]:
    """Run a program under the probe and return {rank: [per-iteration records]}.

    Each record: {"it", "losses": [unscaled loss per backward], "skipped", "scale", "nonfinite", "time"}.
    Raises RuntimeError (with the output tail) when the program fails before recording anything.
    """
    side = run_side(folder, entry, args, steps=steps, nproc=nproc, launcher=launcher, device=device, seed=seed,
                    timeout=timeout)
    if not side.records and (side.returncode or side.timed_out):
        raise RuntimeError("run failed (exit %s):\n%s" % (side.returncode, tail(side.output)))
    return side.records


def _starts_workers(script: str) -> bool:
    try:
        with open(script, encoding="utf-8", errors="replace") as f:
            return uses_spawn(f.read())
    except OSError:
        return True


def _run_fresh(cmd: List[str], cwd: str, env: Dict[str, str], timeout: float):
    """(exit code or None, output, timed out) of `cmd` in a fresh interpreter."""
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=timeout)
        return proc.returncode, proc.stdout.decode("utf-8", "replace"), False
    except subprocess.TimeoutExpired as e:
        output = (e.stdout or b"").decode("utf-8", "replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return None, output, True


def tail(text: str, n: int = 20) -> str:
    """The last n lines of a program's output."""
    return "\n".join(text.rstrip().splitlines()[-n:])
