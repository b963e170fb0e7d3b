"""The SlowFast launch_job shape (fixtures/runnable_launch_job/{legacy,migrated}), run on the CPU with gloo.

legacy: tools/run_net.py calls `launch_job(cfg, init_method, func)` of vidkit/launcher.py for training,
then for each test view; launch_job mp.spawns `procs.run` of vidkit/procs.py, which joins the process
group. Each phase is a fresh set of processes. migrated: the hand migration, one `torchrun
--nproc-per-node N` for all phases, each launch_job call running the job in the same processes (the
init joined once, guarded by is_initialized; a copy of cfg per phase; a barrier after each phase).
Records per phase, view, rank and step (loss, world size, the phase's learning rate) must be equal.

apex2amp keeps the refusal (the migration spans two files and the caller): the legacy tree stays
byte-identical and A2A406 spells out this very migration, the edits of the hand migration's files.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.join(REPO, "fixtures", "runnable_launch_job")

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(folder: str) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONHASHSEED="0", PYTHONPATH=folder)
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    return env


def _records(proc) -> dict:
    out = {}
    for chunk in re.findall(r"\{[^{}]*\"loss\"[^{}]*\}", proc.stdout):
        rec = json.loads(chunk)
        out[(rec["phase"], rec["view"], rec["rank"], rec["step"])] = (rec["world"], rec["lr"], rec["loss"])
    assert proc.returncode == 0 and out, f"rc={proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return out


def _script(folder: str, out: str, nproc: int) -> list:
    return [os.path.join(folder, "tools", "run_net.py"), "--num-gpus", str(nproc), "--backend", "gloo",
            "--steps", "3", "--output-dir", out]


def run_legacy(out: str, nproc: int) -> dict:
    folder = os.path.join(ROOT, "legacy")
    cmd = [sys.executable] + _script(folder, out, nproc) + ["--init-method", f"tcp://127.0.0.1:{_free_port()}"]
    return _records(subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=_env(folder)))


def run_torchrun(folder: str, out: str, nproc: int):
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}", "--master-addr=127.0.0.1",
           f"--master-port={_free_port()}"] + _script(folder, out, nproc)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=_env(folder))


@pytest.mark.parametrize("nproc", [2, 1])
def test_spawned_phases_and_one_torchrun_agree(nproc, tmp_path):
    (tmp_path / "legacy").mkdir()
    (tmp_path / "migrated").mkdir()
    legacy = run_legacy(str(tmp_path / "legacy"), nproc)
    migrated = _records(run_torchrun(os.path.join(ROOT, "migrated"), str(tmp_path / "migrated"), nproc))
    phases = {(p, v) for p, v, _, _ in legacy}
    assert phases == {("train", 0), ("test", 1), ("test", 3)}
    assert {r for _, _, r, _ in legacy} == set(range(nproc)) and sorted(legacy) == sorted(migrated)
    for key in legacy:
        assert legacy[key][:2] == migrated[key][:2], key  # world size, and train's lr change stays in train
        assert legacy[key][2] == pytest.approx(migrated[key][2], rel=1e-6, abs=1e-7), key


def test_joining_in_every_phase_fails_under_torchrun(tmp_path):
    """Why the migration joins once: the spawn replaced by a call but the init left as it was (rank and
    world size from torchrun) fails in the second phase, the second init_process_group of the process."""
    folder = tmp_path / "naive"
    shutil.copytree(os.path.join(ROOT, "migrated"), folder)
    procs = folder / "vidkit" / "procs.py"
    text = procs.read_text(encoding="utf-8")
    guarded = "    if not torch.distributed.is_initialized():\n        torch.distributed.init_process_group("
    assert guarded in text
    procs.write_text(text.replace(guarded, "    if True:\n        torch.distributed.init_process_group("),
                     encoding="utf-8")
    (tmp_path / "out").mkdir()
    proc = run_torchrun(str(folder), str(tmp_path / "out"), 2)
    assert proc.returncode != 0
    assert '"phase": "train"' in proc.stdout and '"phase": "test"' not in proc.stdout
    assert "twice" in proc.stdout + proc.stderr  # trying to initialize the default process group twice


def test_a_torchrun_line_that_disagrees_with_the_config_is_an_error(tmp_path):
    """The config asks for 2 processes, torchrun starts 1: the migrated run stops before joining, where
    it would otherwise train alone believing in a world of 2."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=1", "--master-addr=127.0.0.1",
           f"--master-port={_free_port()}"] + _script(os.path.join(ROOT, "migrated"), str(tmp_path), 2)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=_env(os.path.join(ROOT, "migrated")))
    assert proc.returncode != 0 and '"loss"' not in proc.stdout
    assert "torchrun --nnodes=1 --node_rank=0 --nproc_per_node=2" in proc.stdout + proc.stderr


def _cli(cwd, *args):
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "migrate", *args, "--no-cache"], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env=env)


def _tree(root):
    return {os.path.relpath(os.path.join(d, f), root): open(os.path.join(d, f), "rb").read()
            for d, _, fs in os.walk(root) for f in fs if f.endswith(".py")}


def _flat(text: str) -> str:
    return " ".join(text.split()).replace("( ", "(")


def test_rewrite_keeps_the_tree_and_its_finding_is_the_hand_migration(tmp_path):
    work = tmp_path / "legacy"
    shutil.copytree(os.path.join(ROOT, "legacy"), work)
    before = _tree(work)
    proc = _cli(work, "rewrite", ".")
    assert proc.returncode == 1, proc.stdout + proc.stderr  # to review
    assert _tree(work) == before
    found = [ln for ln in proc.stdout.splitlines() if " A2A406 " in ln]
    assert len(found) == 1 and found[0].startswith("vidkit/launcher.py:10:"), proc.stdout
    finding = found[0]
    migrated = os.path.join(ROOT, "migrated", "vidkit")
    launcher = _flat(open(os.path.join(migrated, "launcher.py"), encoding="utf-8").read())
    procs = _flat(open(os.path.join(migrated, "procs.py"), encoding="utf-8").read())
    call = re.search(r"replace the spawn with `([^`]+)`", finding).group(1)
    init = re.search(r"join once through env://: `([^`]+)`", finding).group(1)
    assert call in launcher and "torch.distributed.barrier()" in launcher and "torch.distributed.barrier()" in finding
    assert init in procs and "vidkit/procs.py:8" in finding
    assert "torchrun --standalone --nproc_per_node=<cfg.NUM_GPUS>" in finding
    assert "--nnodes=<cfg.NUM_SHARDS> --node_rank=<cfg.SHARD_ID>" in finding
