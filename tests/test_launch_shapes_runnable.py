"""Launch shapes of real code (fixtures/runnable_launch/<name>/{legacy,migrated}), run on the CPU with gloo.

The legacy script spawns its own workers (`python train.py ...`); the hand-migrated twin and the
rewriter's output run under real torchrun. Each mode of a shape is run: the gated spawn both with two
processes (the mp.spawn branch; torchrun --nproc_per_node 2) and with one (the single-process `else`;
torchrun --nproc_per_node 1). Per-rank loss curves must be equal.
"""
import functools
import json
import os
import re
import shutil
import socket
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.join(REPO, "fixtures", "runnable_launch")
COMMON = ["--backend", "gloo", "--device", "cpu", "--steps", "4"]

# (shape, processes): the legacy side's extra arguments for that many processes (PORT: a free port)
MODES = {
    ("gated_spawn", 2): ["--nprocs", "2", "--port", "PORT"],
    ("gated_spawn", 1): ["--nprocs", "1"],
    ("worker_world_size", 2): ["--nprocs", "2", "--dist-url", "tcp://127.0.0.1:PORT"],
    ("init_in_helper", 2): ["--nprocs", "2", "--port", "PORT"],  # setup(gpu, ngpus, args) joins the group
    ("single_branch_first", 2): ["--nprocs", "2"],  # `if n == 1: worker(rank=0, ...) else: spawn(fn=worker, ...)`
    ("single_branch_first", 1): [],
}

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _losses(proc) -> dict:
    out = {}
    for chunk in re.findall(r"\{[^{}]*\"loss\"[^{}]*\}", proc.stdout):
        rec = json.loads(chunk)
        out[(rec["rank"], rec["step"])] = rec["loss"]
    assert out, f"no losses printed (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return out


def _env() -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONHASHSEED="0")
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    return env


def run_legacy(name: str, nproc: int) -> dict:
    port = str(_free_port())
    extra = [port if a == "PORT" else a.replace("PORT", port) for a in MODES[(name, nproc)]]
    cmd = [sys.executable, os.path.join(ROOT, name, "legacy", "train.py")] + COMMON + extra
    return _losses(subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=_env()))


def run_torchrun(folder: str, nproc: int) -> dict:
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}", "--master_addr=127.0.0.1",
           f"--master_port={_free_port()}", os.path.join(folder, "train.py")] + COMMON
    return _losses(subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=_env()))


@functools.lru_cache(maxsize=None)
def twin_losses(name: str, nproc: int) -> dict:
    return run_torchrun(os.path.join(ROOT, name, "migrated"), nproc)


@pytest.mark.parametrize("name,nproc", sorted(MODES))
def test_legacy_and_hand_migrated_twin_agree(name, nproc):
    legacy = run_legacy(name, nproc)
    migrated = twin_losses(name, nproc)
    assert sorted(legacy) == sorted(migrated) and {r for r, _ in legacy} == set(range(nproc))
    assert legacy == pytest.approx(migrated, rel=1e-6, abs=1e-7)


@functools.lru_cache(maxsize=None)
def _rewritten(name: str, tmp: str) -> str:
    dst = os.path.join(tmp, name)
    shutil.copytree(os.path.join(ROOT, name, "legacy"), dst)
    proc = subprocess.run([sys.executable, "-m", "migrate", "rewrite", dst], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # changed
    assert "A2A401" in proc.stdout and "A2A406" not in proc.stdout, proc.stdout
    return dst


@pytest.mark.parametrize("name,nproc", sorted(MODES))
def test_rewriter_output_runs_under_torchrun_like_the_twin(name, nproc, tmp_path_factory):
    folder = _rewritten(name, str(tmp_path_factory.getbasetemp()))
    text = open(os.path.join(folder, "train.py"), encoding="utf-8").read()
    assert "mp.spawn(" not in text and "init_method" not in text
    assert run_torchrun(folder, nproc) == pytest.approx(twin_losses(name, nproc), rel=1e-6, abs=1e-7)
