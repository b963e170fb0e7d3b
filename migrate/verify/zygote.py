"""Run single-process programs by forking a process that has already imported torch.

Importing torch costs seconds of CPU per run; `verify` runs each side several times (modes, resume
legs), so a side that runs as `python script args` is forked from a zygote (shim/zygote_server.py)
that imported torch once, with the same environment, folder, sys.path and exit code a fresh interpreter
would have. Programs that start their own workers (mp.spawn) or run under torchrun, and any run while
APEX2AMP_VERIFY_FRESH=1 is set, use a fresh interpreter instead. One zygote serves one run at a time;
concurrent callers get one each; at most MAX_IDLE stay idle, and only for the environment last used.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from typing import Dict, List, Optional, Sequence, Tuple

SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shim", "zygote_server.py")
# what a run's own environment may change without a new zygote (read after torch is imported)
PER_RUN_PREFIXES = ("APEX2AMP_",)
PER_RUN_NAMES = frozenset({"PYTHONPATH", "PYTHONUNBUFFERED", "PWD", "OLDPWD", "PYTEST_CURRENT_TEST"})

MAX_IDLE = 2  # idle zygotes kept per environment (each holds an imported torch, ~250 MB)
_lock = threading.Lock()
_idle: Dict[Tuple[Tuple[str, str], ...], List[subprocess.Popen]] = {}


def enabled() -> bool:
    """False when APEX2AMP_VERIFY_FRESH=1 asks for a fresh interpreter per run."""
    return os.environ.get("APEX2AMP_VERIFY_FRESH") != "1"


def _startup_env(env: Dict[str, str]) -> Tuple[Tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in env.items()
                        if k not in PER_RUN_NAMES and not k.startswith(PER_RUN_PREFIXES)))


def _start(key: Tuple[Tuple[str, str], ...]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=dict(key), text=True, bufsize=1)


def _take(key) -> subprocess.Popen:
    with _lock:
        pool = _idle.setdefault(key, [])
        while pool:
            proc = pool.pop()
            if proc.poll() is None:
                return proc
        for other in [k for k in _idle if k != key]:  # an environment not used now: its zygotes go
            for proc in _idle.pop(other):
                _stop(proc)
    return _start(key)


def _stop(proc: subprocess.Popen) -> None:
    try:
        proc.stdin.close()  # the server ends when its requests end
        proc.wait(timeout=5)
    except Exception:
        proc.kill()


def _give_back(key, proc: subprocess.Popen) -> None:
    with _lock:
        pool = _idle.setdefault(key, [])
        if len(pool) >= MAX_IDLE:
            _stop(proc)
        else:
            pool.append(proc)


def run(script: str, args: Sequence[str], cwd: str, env: Dict[str, str],
        timeout: float) -> Optional[Tuple[Optional[int], str, bool]]:
    """(exit code or None, output, timed out) of `python script args`, or None if no zygote could run it."""
    key = _startup_env(env)
    proc = _take(key)
    fd, out_path = tempfile.mkstemp(prefix="apex2amp-run-", suffix=".log")
    os.close(fd)
    try:
        request = {"script": script, "args": list(args), "cwd": cwd, "env": env, "output": out_path,
                   "timeout": timeout}
        try:
            proc.stdin.write(json.dumps(request) + "\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
        except (OSError, ValueError):
            line = ""
        if not line:
            proc.kill()
            return None
        reply = json.loads(line)
        _give_back(key, proc)
        with open(out_path, encoding="utf-8", errors="replace") as f:
            output = f.read()
        return reply["rc"], output, bool(reply["timed_out"])
    finally:
        os.unlink(out_path)
