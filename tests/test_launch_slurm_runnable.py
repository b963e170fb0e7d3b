"""A rank taken from SLURM (fixtures/runnable_launch/slurm_rank/{legacy,migrated}), run on the CPU with gloo.

The legacy script spawns its own workers, once as SLURM starts it on node 0 of one node (SLURM_JOB_ID,
SLURM_NODEID, SLURM_NNODES set: the rank is SLURM_NODEID * processes per node + process index) and
once outside SLURM (one node, rank = process index). The hand migration and the rewriter's output run
under real torchrun with 2 processes; per-rank loss curves (and the world size each rank saw) must
be equal in both modes.
"""
import functools
import os
import shutil
import subprocess
import sys

import pytest

from test_launch_shapes_runnable import COMMON, REPO, ROOT, _env, _free_port, _losses, run_torchrun

pytestmark = pytest.mark.slow
CASE = os.path.join(ROOT, "slurm_rank")
SLURM = {"SLURM_JOB_ID": "4242", "SLURM_NODEID": "0", "SLURM_NNODES": "1", "SLURM_LAUNCH_NODE_IPADDR": "127.0.0.1"}


def _legacy(slurm: bool) -> dict:
    env = _env()
    for var in SLURM:
        env.pop(var, None)
    if slurm:
        env.update(SLURM)
    cmd = [sys.executable, os.path.join(CASE, "legacy", "train.py")] + COMMON + \
        ["--nprocs", "2", "--port", str(_free_port())]
    return _losses(subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env))


@functools.lru_cache(maxsize=None)
def _twin() -> dict:
    return run_torchrun(os.path.join(CASE, "migrated"), 2)


@pytest.mark.parametrize("slurm", [True, False], ids=["slurm", "one-node"])
def test_legacy_and_hand_migrated_twin_agree(slurm):
    legacy = _legacy(slurm)
    assert sorted(legacy) == sorted(_twin()) and {r for r, _ in legacy} == {0, 1}
    assert legacy == pytest.approx(_twin(), rel=1e-6, abs=1e-7)


def test_rewriter_output_runs_under_torchrun_like_the_twin(tmp_path):
    folder = tmp_path / "slurm_rank"
    shutil.copytree(os.path.join(CASE, "legacy"), folder)
    proc = subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(folder), "--no-cache"],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 1 and "A2A401" in proc.stdout and "A2A406" not in proc.stdout, proc.stdout
    assert "srun --ntasks-per-node=1 torchrun --nnodes=$SLURM_NNODES --node_rank=$SLURM_NODEID" in proc.stdout
    text = (folder / "train.py").read_text(encoding="utf-8")
    assert "multiprocessing.spawn(" not in text and "init_method" not in text and "+= gpu" not in text
    again = subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(folder), "--no-cache"],
                           capture_output=True, text=True, cwd=REPO, timeout=120)
    assert (folder / "train.py").read_text(encoding="utf-8") == text, again.stdout
    assert run_torchrun(str(folder), 2) == pytest.approx(_twin(), rel=1e-6, abs=1e-7)
