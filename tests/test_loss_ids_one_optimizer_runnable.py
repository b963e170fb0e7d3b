"""Several apex loss ids feeding one optimizer (`num_losses=len(task2scaler)`, `loss_id=task2scaler[name]`,
tasks interleaved under `delay_unscale` accumulation) become one GradScaler (A2A184). End to end through the
CLI: equal to the hand migration step by step in fp32, O1 and O2 and with an overflow; equal to apex (its CPU
emulation) in O1 without an overflow, and with one when no `delay_unscale` window mixes the losses' scales
(the same step skipped, the same losses after it). Under `delay_unscale` after an overflow apex unscaled a
sum of gradients scaled by two different scales with one of them; one scale makes that sum exact, so there
the curves part after the skipped step, as the rule says."""
import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from migrate.verify import collect_losses  # noqa: E402

CASE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "runnable",
                    "loss_ids_one_optimizer")
MODES = {"fp32": [], "O1": ["--fp16"], "O2": ["--fp16", "--opt-level", "O2"],
         "O1-overflow": ["--fp16", "--inf-at", "3"]}


def _read(path):
    with open(path, encoding="utf-8") as fh:
        return fh.read()


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory):
    dst = str(tmp_path_factory.mktemp("loss_ids_one_optimizer") / "legacy")
    shutil.copytree(os.path.join(CASE, "legacy"), dst)
    r = subprocess.run([sys.executable, "-m", "migrate", "rewrite", dst], capture_output=True, text=True)
    assert r.returncode == 1 and "A2A184" in r.stdout and " 0 need review" in r.stdout, r.stdout + r.stderr
    code = _read(os.path.join(dst, "train.py")).split('"""', 2)[2]
    assert "apex" not in code and "loss_id" not in code and "num_losses" not in code
    text = code
    assert text.count("torch.amp.GradScaler(") == 1 and text.count("scaler.unscale_(optimizer)") == 1
    return dst


def _records(folder, args, steps=6):
    return [(r["losses"], r["skipped"], r["scale"]) for r in
            collect_losses(folder, "train.py", args, steps=steps, device="cpu")[0]]


@pytest.mark.parametrize("mode", list(MODES))
def test_one_scaler_equals_hand_migration(rewritten, mode):
    tool = _records(rewritten, MODES[mode])
    hand = _records(os.path.join(CASE, "migrated"), MODES[mode])
    assert len(hand) == 6 and tool == hand


@pytest.mark.parametrize("args", [["--fp16"], ["--fp16", "--inf-at", "3", "--accum", "1"]],
                         ids=["no-overflow", "overflow-no-delay"])
def test_one_scaler_equals_apex(rewritten, args):
    apex_side = _records(os.path.join(CASE, "legacy"), args, steps=8)
    tool = _records(rewritten, args, steps=8)
    assert [r[0] for r in tool] == [r[0] for r in apex_side]
    assert [r[1] for r in tool] == [r[1] for r in apex_side]
    if "--inf-at" in args:
        assert any(r[1] for r in tool)  # the overflow skipped a step on both sides


def test_after_an_overflow_under_delay_unscale_apex_mixed_two_scales(rewritten):
    args = MODES["O1-overflow"]
    apex_side = _records(os.path.join(CASE, "legacy"), args)
    tool = _records(rewritten, args)
    assert [r[1] for r in tool] == [r[1] for r in apex_side] == [False, True, False, False, False, False]
    assert [r[0] for r in tool][:4] == [r[0] for r in apex_side][:4]
    assert [r[0] for r in tool][4:] != [r[0] for r in apex_side][4:]
