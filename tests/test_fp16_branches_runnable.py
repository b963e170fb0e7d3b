"""FP16_Optimizer made under `if args.cuda and args.fp16:` beside an fp32 path (the transformer-xl shape): a
wrapper alias of the model for the forward (`para_model = model.to(device)`), the backward chosen per mode on
each chunk (`if args.fp16: optimizer.backward(loss) else: loss.backward()`), the clip chosen per mode and
one `optimizer.step()` both modes run. The CLI makes the scaler before the gate with enabled=<its test>,
keeps both branches, autocasts the forward through the alias with enabled=scaler.is_enabled(), and equals
the hand migration step by step in fp32 and fp16 (dynamic and static scale); the legacy run under the apex
emulation equals it exactly in fp32 and within fp16 rounding in fp16."""
import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from migrate.verify import collect_losses  # noqa: E402

CASE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "runnable",
                    "fp16_branches")
MODES = [[], ["--cuda", "--fp16", "--dynamic-loss-scale"], ["--cuda", "--fp16", "--static-loss-scale", "128"],
         ["--cuda"]]
IDS = ["fp32", "fp16-dynamic", "fp16-static", "cuda-fp32"]


def _rows(folder, mode):
    return [(r["losses"], r["skipped"], r["scale"])
            for r in collect_losses(folder, "train.py", mode + ["--steps", "8"], steps=8, device="cpu")[0]]


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory):
    dst = str(tmp_path_factory.mktemp("fp16_branches") / "legacy")
    shutil.copytree(os.path.join(CASE, "legacy"), dst)
    r = subprocess.run([sys.executable, "-m", "migrate", "rewrite", dst], capture_output=True, text=True)
    assert "A2A501" in r.stdout and "A2A502" not in r.stdout, r.stdout + r.stderr
    with open(os.path.join(dst, "train.py"), encoding="utf-8") as fh:
        text = fh.read()
    assert "FP16_Optimizer(" not in text and ".half()" not in text and "enabled=args.cuda and args.fp16" in text
    return dst


@pytest.mark.parametrize("mode", MODES, ids=IDS)
def test_rewrite_equals_hand_migration(rewritten, mode):
    tool = _rows(rewritten, mode)
    hand = _rows(os.path.join(CASE, "migrated"), mode)
    assert len(hand) == 8 and tool == hand


@pytest.mark.parametrize("mode", MODES, ids=IDS)
def test_legacy_under_apex_matches_hand_migration(mode):
    legacy = _rows(os.path.join(CASE, "legacy"), mode)
    hand = _rows(os.path.join(CASE, "migrated"), mode)
    assert [s for _, s, _ in legacy] == [s for _, s, _ in hand]
    lo = [x for r in legacy for x in r[0]]
    ho = [x for r in hand for x in r[0]]
    if "--fp16" not in mode:
        assert lo == ho
    else:
        assert lo == pytest.approx(ho, rel=2e-3)
