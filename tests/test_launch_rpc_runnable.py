"""An RPC world with roles by rank (fixtures/runnable_launch/rpc_roles): the mp.spawn program, its hand
migration under real torchrun, and the rewriter's output under real torchrun print the same per-rank
records. The worker is handed torchrun's RANK (its roles go by the global rank), rpc.init_rpc keeps
rank= / world_size= (now RANK / WORLD_SIZE), the MASTER_ADDR / MASTER_PORT assignments go."""
import json
import os
import re
import shutil
import socket
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.join(REPO, "fixtures", "runnable_launch", "rpc_roles")
COMMON = ["--backend", "gloo", "--device", "cpu", "--steps", "4"]

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONHASHSEED="0")
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    return env


def _records(proc) -> dict:
    out = {}
    for chunk in re.findall(r"\{[^{}]*\"loss\"[^{}]*\}", proc.stdout):
        rec = json.loads(chunk)
        out[(rec["rank"], rec["step"])] = rec["loss"]
    assert out, f"no records printed (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    assert proc.returncode == 0, proc.stderr
    return out


def _legacy() -> dict:
    cmd = [sys.executable, os.path.join(ROOT, "legacy", "train.py")] + COMMON + ["--port", str(_free_port())]
    return _records(subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=_env()))


def _torchrun(folder: str) -> dict:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
           f"--master_port={_free_port()}", os.path.join(folder, "train.py")] + COMMON
    return _records(subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=_env()))


def test_rpc_world_legacy_twin_and_rewrite_agree(tmp_path):
    legacy = _legacy()
    assert {r for r, _ in legacy} == {0, 1} and len(legacy) == 8
    twin = _torchrun(os.path.join(ROOT, "migrated"))
    assert twin == pytest.approx(legacy, rel=1e-6, abs=1e-7)

    dst = tmp_path / "rewritten"
    shutil.copytree(os.path.join(ROOT, "legacy"), dst)
    proc = subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(dst)], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "A2A401" in proc.stdout and "A2A406" not in proc.stdout and "A2A412" not in proc.stdout, proc.stdout
    assert "torchrun --standalone --nproc_per_node=2 " in proc.stdout + proc.stderr
    text = (dst / "train.py").read_text(encoding="utf-8")
    assert "mp.spawn(" not in text and "MASTER_PORT" not in text
    assert 'run_worker(int(os.environ["RANK"]), args.world_size)' in text
    assert text == open(os.path.join(ROOT, "migrated", "train.py"), encoding="utf-8").read().replace(
        "launched by torchrun (migrated by hand).", "launched with mp.spawn.")
    assert _torchrun(str(dst)) == pytest.approx(legacy, rel=1e-6, abs=1e-7)
