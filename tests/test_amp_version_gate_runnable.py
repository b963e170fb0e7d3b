"""A trainer with a torch-version gate over native, apex and fp32 backends (kept on `self`), end to end:
the gate's apex branch and the `self.backend == "apex"` branches go (A2A111, A2A417), the native branch
and its `self.scaler` stay. The CLI's rewrite of fixtures/runnable/version_gate_trainer, the hand twin
and the legacy script (on the apex emulation) give identical curves with --fp16 and without."""
import ast
import os
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from migrate.verify import collect_losses  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASE = os.path.join(REPO, "fixtures", "runnable", "version_gate_trainer")
STEPS = 6


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory):
    dst = tmp_path_factory.mktemp("version_gate_trainer")
    shutil.copytree(os.path.join(CASE, "legacy"), dst, dirs_exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(dst)], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 1 and "A2A417" in proc.stdout, proc.stdout + proc.stderr
    tree = ast.parse((dst / "train.py").read_text())
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("apex")]
    assert "self.scaler" in (dst / "train.py").read_text()
    return str(dst)


def _curve(records):
    return [(r["losses"], r["skipped"], r["scale"]) for r in records[0]]


@pytest.mark.parametrize("mode", [["--fp16"], []], ids=["fp16", "fp32"])
def test_rewrite_twin_and_legacy_agree(rewritten, mode):
    args = mode + ["--steps", str(STEPS)]
    tool = collect_losses(rewritten, "train.py", args, steps=STEPS, device="cpu")
    hand = collect_losses(os.path.join(CASE, "migrated"), "train.py", args, steps=STEPS, device="cpu")
    legacy = collect_losses(os.path.join(CASE, "legacy"), "train.py", args, steps=STEPS, device="cpu")
    assert len(_curve(hand)) == STEPS and _curve(tool) == _curve(hand) == _curve(legacy)
