"""A trainer whose step runs only when the clipped norm is finite (aps' ApexTrainer shape, issue 24 item 1):
the forward in an OOM-tolerant try, the loss computed in the scale_loss item, the skipping branch returning
without a step. The hand migration (fixtures/runnable/finite_norm_trainer/migrated, the shape the CLI writes,
see fixtures/amp_regions/finite_norm_trainer.*) updates the scaler on that branch too; it and the legacy run
(apex emulation) print the same iterations: the same steps taken and skipped, the same loss scale after each,
the same weights, in fp32 (O0) and O1/O2, with and without accumulation, before and after an overflow."""
import os
import re

import pytest

torch = pytest.importorskip("torch")

from migrate.verify.runner import run_side  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASE = os.path.join(REPO, "fixtures", "runnable", "finite_norm_trainer")
LINE = re.compile(r"^ITER (\d+) ok=(\w+) scale=([\d.e+-]+) w=([-\d.e+]+|nan|inf)$", re.M)
MODES = [["--opt-level", "O0"], ["--opt-level", "O1"], ["--opt-level", "O2"],
         ["--opt-level", "O1", "--blow-at", "3"], ["--opt-level", "O2", "--blow-at", "3", "--acmu", "2"],
         ["--opt-level", "O1", "--clip", "0"]]


def iterations(side, args):
    run = run_side(os.path.join(CASE, side), "train.py", args + ["--steps", "8"], steps=100, device="cpu")
    rows = LINE.findall(run.output)
    assert len(rows) == 8, run.output[-3000:]
    return rows


@pytest.mark.parametrize("mode", MODES, ids=lambda m: "-".join(x.lstrip("-") for x in m))
def test_hand_migration_matches_apex(mode):
    legacy, hand = iterations("legacy", mode), iterations("migrated", mode)
    assert [(i, ok, float(s)) for i, ok, s, _ in legacy] == [(i, ok, float(s)) for i, ok, s, _ in hand]
    rel = 1e-3 if "O2" in mode else 1e-6  # under O2 apex's model (printed) holds fp16 copies of the fp32 masters
    for (_, _, _, a), (_, _, _, b) in zip(legacy, hand):
        assert float(a) == pytest.approx(float(b), rel=rel) or a == b
    if "--blow-at" in mode:
        assert [ok for _, ok, _, _ in hand][4:] == ["False"] * 4  # stuck after the overflow, as apex was


def test_the_hand_twin_is_the_class_the_cli_writes():
    # tests/test_golden.py holds the CLI to fixtures/amp_regions/finite_norm_trainer.after.py; its trainer class is
    # the hand twin's, so the run above covers the rewrite too
    with open(os.path.join(REPO, "fixtures", "amp_regions", "finite_norm_trainer.after.py"), encoding="utf-8") as fh:
        after = fh.read()
    with open(os.path.join(CASE, "migrated", "train.py"), encoding="utf-8") as fh:
        hand = fh.read()
    assert after[after.index("class ApexTrainer"):].rstrip() == \
        hand[hand.index("class ApexTrainer"):hand.index("def scale_of")].rstrip()
