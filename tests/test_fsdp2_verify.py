"""`apex2amp verify` on an `--target fsdp2` migration: the torchrun-launched apex O2 original (emulated apex)
and the FSDP2 twin both run under torchrun with 2 processes on the CPU; the fidelity tolerance applies."""
import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASE = os.path.join(REPO, "fixtures", "runnable_fsdp2", "apex_o2_layers")

pytestmark = pytest.mark.slow


def test_verify_runs_both_sides_under_torchrun_and_passes_with_fidelity_tolerance(tmp_path):
    out = tmp_path / "v.json"
    proc = subprocess.run(
        [sys.executable, "-m", "migrate", "verify", os.path.join(CASE, "legacy"), os.path.join(CASE, "migrated"),
         "--entry", "train.py", "--steps", "3", "--nproc", "2", "--device", "cpu", "--dtype", "bf16", "--mode", "",
         "--json", str(out), "--", "--backend", "gloo", "--device", "cpu"],
        capture_output=True, text=True, timeout=400, env=dict(os.environ, PYTHONPATH=REPO, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "fidelity tolerance applies" in proc.stdout
    data = json.loads(out.read_text())
    text = json.dumps(data)
    assert '"passed": true' in text
    assert "rank" in proc.stdout and "\n1    2" in proc.stdout  # both ranks, every step
