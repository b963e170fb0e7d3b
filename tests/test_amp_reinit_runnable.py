"""A trainer that re-runs amp.initialize before amp.load_state_dict on restore (A2A416), end to end:
the CLI's rewrite of fixtures/runnable/restore_reinit and the hand-migrated twin give identical loss
curves (restore in the middle of the run) in every opt level; the legacy side, on the apex emulation,
matches the twin where apex keeps fp32 weights (O0, O1)."""
import os
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from migrate.verify import collect_losses  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASE = os.path.join(REPO, "fixtures", "runnable", "restore_reinit")
STEPS = 8


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory):
    dst = tmp_path_factory.mktemp("restore_reinit")
    shutil.copytree(os.path.join(CASE, "legacy"), dst, dirs_exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(dst)], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "A2A416" in proc.stdout and "A2A117" not in proc.stdout, proc.stdout
    text = (dst / "train.py").read_text()
    assert "import apex" not in text and "from apex" not in text and "amp.initialize(" not in text and "self.scaler.load_state_dict(" in text
    return str(dst)


def _curve(records):
    return [(r["losses"], r["skipped"], r["scale"]) for r in records[0]]


@pytest.mark.parametrize("opt_level", ["O0", "O1", "O2"])
def test_rewrite_matches_the_hand_migration_across_the_restore(rewritten, opt_level):
    args = ["--opt-level", opt_level, "--steps", str(STEPS), "--restore-at", "3"]
    tool = collect_losses(rewritten, "train.py", args, steps=STEPS, device="cpu")
    hand = collect_losses(os.path.join(CASE, "migrated"), "train.py", args, steps=STEPS, device="cpu")
    assert len(_curve(hand)) == STEPS and _curve(tool) == _curve(hand)


@pytest.mark.parametrize("opt_level", ["O0", "O1"])
def test_legacy_on_the_apex_emulation_matches_the_twin(opt_level):
    args = ["--opt-level", opt_level, "--steps", str(STEPS), "--restore-at", "3"]
    legacy = collect_losses(os.path.join(CASE, "legacy"), "train.py", args, steps=STEPS, device="cpu")
    hand = collect_losses(os.path.join(CASE, "migrated"), "train.py", args, steps=STEPS, device="cpu")
    got = [loss for r in legacy[0] for loss in r["losses"]]
    want = [loss for r in hand[0] for loss in r["losses"]]
    assert len(got) == STEPS and got == pytest.approx(want, rel=1e-4)
