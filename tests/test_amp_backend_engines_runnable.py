"""Engine classes, one per precision backend on a shared base (A2A418), end to end: the apex engine's
migration overrides the base's optimizer_step with the scaler's step, the base and the native engine
stay. The CLI's rewrite of fixtures/runnable/backend_engines and the hand twin give identical curves
for every engine and opt level; the legacy script (apex emulation) matches where apex keeps fp32
weights."""
import os
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from migrate.verify import collect_losses  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASE = os.path.join(REPO, "fixtures", "runnable", "backend_engines")
STEPS = 6
MODES = [["--engine", "apex", "--opt-level", "O1"], ["--engine", "apex", "--opt-level", "O0"],
         ["--engine", "native"], ["--engine", "fp32"]]


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory):
    dst = tmp_path_factory.mktemp("backend_engines")
    shutil.copytree(os.path.join(CASE, "legacy"), dst, dirs_exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(dst)], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 1 and "A2A418" in proc.stdout and "A2A126" not in proc.stdout, proc.stdout
    text = (dst / "train.py").read_text()
    assert "from apex" not in text and text.count("def optimizer_step") == 3
    return str(dst)


def _losses(records):
    return [loss for r in records[0] for loss in r["losses"]]


@pytest.mark.parametrize("mode", MODES, ids=lambda m: "-".join(x.lstrip("-") for x in m))
def test_rewrite_matches_the_twin_and_the_legacy_run(rewritten, mode):
    args = mode + ["--steps", str(STEPS)]
    tool = collect_losses(rewritten, "train.py", args, steps=STEPS, device="cpu")
    hand = collect_losses(os.path.join(CASE, "migrated"), "train.py", args, steps=STEPS, device="cpu")
    legacy = collect_losses(os.path.join(CASE, "legacy"), "train.py", args, steps=STEPS, device="cpu")
    assert [(r["losses"], r["skipped"], r["scale"]) for r in tool[0]] == \
        [(r["losses"], r["skipped"], r["scale"]) for r in hand[0]]
    assert len(_losses(hand)) == STEPS and _losses(legacy) == pytest.approx(_losses(hand), rel=1e-4)
