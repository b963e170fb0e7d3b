"""Runnable checks of two migrations, on the CPU: apex's per-loss scalers (`num_losses=2`, `loss_id=0/1`)
become one GradScaler per loss, and the autocast region of a backward helper's caller covers the forward.

Each legacy program runs on the apex emulation, its rewrite by the CLI and its hand migration, under
the verify probe (`migrate.verify.collect_losses`); they are compared step by step: losses, loss
scales, skipped steps (the GAN logs both scales and a generator weight checksum per iteration)."""
import json
import math
import os
import shutil
import subprocess
import sys

import pytest

from migrate.verify import collect_losses

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "runnable")
GAN = os.path.join(ROOT, "gan_loss_ids")
HELPER = os.path.join(ROOT, "forward_loss_helper")


def _rewritten(src, dst):
    shutil.copytree(os.path.join(src, "legacy"), dst, dirs_exist_ok=True)
    res = subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(dst)], capture_output=True, text=True)
    assert res.returncode == 1, res.stdout + res.stderr
    return str(dst)


@pytest.fixture(scope="module")
def gan_tool(tmp_path_factory):
    return _rewritten(GAN, tmp_path_factory.mktemp("gan_tool"))


@pytest.fixture(scope="module")
def helper_tool(tmp_path_factory):
    return _rewritten(HELPER, tmp_path_factory.mktemp("helper_tool"))


def _gan_run(folder, args, log):
    records = collect_losses(folder, "train_gan.py", ["--log", str(log), *args], steps=1000, device="cpu")
    with open(log, encoding="utf-8") as fh:
        return records, [json.loads(line) for line in fh]


def _close(a, b):
    return a is None and b is None or (a is not None and b is not None and math.isclose(a, b, rel_tol=1e-5))


MODES = {"fp32": ["--opt-level", "O0"], "fp16": ["--opt-level", "O1"],
         "fp16-generator-overflows": ["--opt-level", "O1", "--g-weight", "64"]}


@pytest.mark.parametrize("mode", sorted(MODES))
def test_gan_per_loss_scalers_match_apex_step_by_step(gan_tool, mode, tmp_path):
    args = ["--steps", "10", *MODES[mode]]
    legacy_rec, legacy = _gan_run(os.path.join(GAN, "legacy"), args, tmp_path / "legacy.jsonl")
    hand_rec, hand = _gan_run(os.path.join(GAN, "migrated"), args, tmp_path / "hand.jsonl")
    tool_rec, tool = _gan_run(gan_tool, args, tmp_path / "tool.jsonl")
    assert len(legacy) == len(hand) == len(tool) == 10
    assert tool == hand  # the rewrite and the hand migration compute the same thing
    strip = [[(r["losses"], r["skipped"], r["scale"]) for r in recs[0]] for recs in (tool_rec, hand_rec)]
    assert strip[0] == strip[1]
    for a, h in zip(legacy, hand):  # apex's two loss scalers against the two GradScalers
        assert (a["scale_d"], a["scale_g"]) == (h["scale_d"], h["scale_g"]), (a, h)
        assert _close(a["loss_d"], h["loss_d"]) and _close(a["loss_g"], h["loss_g"]), (a, h)
        assert _close(a["g_weights"], h["g_weights"]), (a, h)  # the same generator steps were skipped
    flat = [[v for r in recs[0] for v in r["losses"]] for recs in (legacy_rec, hand_rec)]
    # the probe closes apex's last iteration (a critic step alone) only at the generator's next step
    assert len(flat[1]) == 15 and len(flat[0]) >= 14 and all(_close(x, y) for x, y in zip(*flat))
    if mode == "fp32":
        assert {(r["scale_d"], r["scale_g"]) for r in hand} == {(1.0, 1.0)}
    elif mode == "fp16":
        assert {(r["scale_d"], r["scale_g"]) for r in hand} == {(65536.0, 65536.0)}
    else:
        # only the generator's scale drops, and its steps are skipped while it does
        assert {r["scale_d"] for r in hand} == {65536.0}
        assert hand[-1]["scale_g"] < 65536.0
        drops = [i for i in range(1, len(hand)) if hand[i]["scale_g"] < hand[i - 1]["scale_g"]]
        assert drops and all(hand[i]["g_weights"] == hand[i - 1]["g_weights"] for i in drops)


@pytest.mark.parametrize("args", [["--fp16"], []], ids=["fp16", "fp32"])
def test_backward_helper_caller_gets_the_autocast_region(helper_tool, args):
    with open(os.path.join(helper_tool, "train.py"), encoding="utf-8") as fh:
        text = fh.read()
    assert "with torch.autocast(" in text and "apex" not in text
    run = ["--steps", "6", *args]
    legacy = collect_losses(os.path.join(HELPER, "legacy"), "train.py", run, steps=6, device="cpu")
    hand = collect_losses(os.path.join(HELPER, "migrated"), "train.py", run, steps=6, device="cpu")
    tool = collect_losses(helper_tool, "train.py", run, steps=6, device="cpu")
    t, h, a = ([(r["losses"], r["skipped"], r["scale"]) for r in recs[0]] for recs in (tool, hand, legacy))
    assert len(h) == 6 and t == h
    for (la, sa, ca), (lh, sh, ch) in zip(a, h):
        assert (sa, ca) == (sh, ch) and all(_close(x, y) for x, y in zip(la, lh)), (a, h)
