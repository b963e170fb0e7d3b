"""`verify --device cpu` on a machine whose accelerator is CUDA: FSDP2's `fully_shard` would build its
default mesh on CUDA over the simulated (gloo, CPU) run; the CPU simulation passes a CPU device mesh.

The machine is stood in for by the migrated twin reporting CUDA as its accelerator (what
`fully_shard`'s default mesh asks), so the case runs on a CPU-only machine too."""
import json
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASE = os.path.join(REPO, "fixtures", "runnable_fsdp2", "apex_o2_layers")
CUDA_ACCELERATOR = 'import torch\ntorch._C._get_accelerator = lambda: torch.device("cuda")  # a CUDA machine\n'

pytestmark = pytest.mark.slow


def test_fully_shard_gets_a_cpu_mesh_under_the_cpu_simulation(tmp_path):
    migrated = tmp_path / "migrated"
    shutil.copytree(os.path.join(CASE, "migrated"), migrated)
    script = migrated / "train.py"
    text = script.read_text()
    head, sep, rest = text.partition("\nimport ")
    script.write_text(head + "\n" + CUDA_ACCELERATOR + "import " + rest)
    out = tmp_path / "v.json"
    proc = subprocess.run(
        [sys.executable, "-m", "migrate", "verify", os.path.join(CASE, "legacy"), str(migrated), "--entry", "train.py",
         "--steps", "2", "--nproc", "2", "--device", "cpu", "--dtype", "bf16", "--mode", "", "--json", str(out),
         "--", "--backend", "gloo", "--device", "cpu"],
        capture_output=True, text=True, timeout=400, env=dict(os.environ, PYTHONPATH=REPO, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    verdict = json.loads(out.read_text())
    assert verdict["passed"] and {row["rank"] for row in verdict["rows"]} == {0, 1}
