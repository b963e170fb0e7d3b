"""End to end: a Trainer (train.py) that keeps the amp state on `self` and a step mixin in another
module (step_mixin.py). The CLI's rewrite, the legacy run (on the apex emulation) and the hand
migration give the same losses, loss scales and skipped steps, in fp32 and in fp16 mode."""
import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from migrate.verify import collect_losses  # noqa: E402

CASE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "runnable",
                    "mixin_trainer")
STEPS = 6


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory):
    dst = tmp_path_factory.mktemp("mixin_trainer")
    shutil.copytree(os.path.join(CASE, "legacy"), dst, dirs_exist_ok=True)
    res = subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(dst)], capture_output=True, text=True)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "A2A128" in res.stdout, res.stdout
    return str(dst)


def _curve(folder, args):
    runs = collect_losses(folder, "train.py", args, steps=STEPS, device="cpu")
    return {rank: [(r["losses"], r["skipped"], r["scale"]) for r in recs] for rank, recs in runs.items()}


@pytest.mark.parametrize("args", [["--steps", str(STEPS)], ["--fp16", "--steps", str(STEPS)]], ids=["fp32", "fp16"])
def test_mixin_across_modules_matches_hand_migration_and_legacy(rewritten, args):
    tool = _curve(rewritten, args)
    hand = _curve(os.path.join(CASE, "migrated"), args)
    legacy = _curve(os.path.join(CASE, "legacy"), args)
    assert tool == hand
    assert all(len(curve) == STEPS for curve in hand.values())
    assert sorted(legacy) == sorted(hand)
    for rank in hand:
        assert [r[1] for r in legacy[rank]] == [r[1] for r in hand[rank]]  # the same steps skipped
        for (lo, _, _), (ho, _, _) in zip(legacy[rank], hand[rank]):
            assert lo == pytest.approx(ho, rel=1e-3, abs=1e-5)
