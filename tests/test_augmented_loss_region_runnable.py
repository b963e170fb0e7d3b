"""Runnable check, on the CPU, of the autocast region over a forward, zero_grad, a weight penalty, meter
updates and the penalty added to the loss (`loss += w * penalty`), with one backward branch per mode and
the largest gradient read before the clip (issue 24): the legacy program on the apex emulation, its
rewrite by the CLI and a hand migration are compared step by step in fp32, O0, O1 and O2. The logged
largest gradient shows the single `scaler.unscale_` lands before the gradient read."""
import json
import math
import os
import shutil
import subprocess
import sys

import pytest

from migrate.verify import collect_losses

FIXTURE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "runnable",
                       "augmented_loss_region")
MODES = {"fp32": [], "O0": ["--fp16", "--opt-level", "O0"], "O1": ["--fp16", "--opt-level", "O1"],
         "O2": ["--fp16", "--opt-level", "O2"]}


@pytest.fixture(scope="module")
def tool(tmp_path_factory):
    dst = tmp_path_factory.mktemp("augmented_tool")
    shutil.copytree(os.path.join(FIXTURE, "legacy"), dst, dirs_exist_ok=True)
    res = subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(dst)], capture_output=True, text=True)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "A2A104" in res.stdout and "A2A105" in res.stdout, res.stdout
    return str(dst)


def _run(folder, args, log):
    records = collect_losses(folder, "train.py", ["--steps", "6", "--log", str(log), *args], steps=1000,
                             device="cpu")
    with open(log, encoding="utf-8") as fh:
        return records, [json.loads(line) for line in fh]


def test_rewrite_wraps_forward_to_augmented_loss(tool):
    with open(os.path.join(tool, "train.py"), encoding="utf-8") as fh:
        text = fh.read()
    assert "apex" not in text and text.count("scaler.unscale_(optimizer)") == 1
    region = text.split("with torch.autocast(", 1)[1].split("scaler.scale(loss).backward()", 1)[0]
    assert "out = model(x)" in region and "loss += args.penalty_weight * penalty" in region
    assert text.index("scaler.unscale_(optimizer)") < text.index("p.grad.abs()")


@pytest.mark.parametrize("mode", sorted(MODES))
def test_augmented_loss_matches_apex_step_by_step(tool, mode, tmp_path):
    legacy_rec, legacy = _run(os.path.join(FIXTURE, "legacy"), MODES[mode], tmp_path / "legacy.jsonl")
    hand_rec, hand = _run(os.path.join(FIXTURE, "migrated"), MODES[mode], tmp_path / "hand.jsonl")
    tool_rec, tool_log = _run(tool, MODES[mode], tmp_path / "tool.jsonl")
    assert len(legacy) == len(hand) == len(tool_log) == 6
    assert tool_log == hand
    strip = [[(r["losses"], r["skipped"], r["scale"]) for r in recs[0]] for recs in (tool_rec, hand_rec)]
    assert strip[0] == strip[1]
    if mode == "O2":
        # O2 becomes the O1 recipe (fp32 weights + autocast): apex's fp16 gradients overflow at the
        # first step and skip it, so only that step's loss compares
        assert math.isclose(legacy[0]["loss"], hand[0]["loss"], rel_tol=2e-2), (legacy[0], hand[0])
        assert all(math.isfinite(h["largest_grad"]) for h in hand)
        return
    tol = 1e-3
    for a, h in zip(legacy, hand):
        assert math.isclose(a["loss"], h["loss"], rel_tol=tol), (mode, a, h)
        # unscaled gradients in both: a gradient read before unscale_ would be 65536 times larger
        assert math.isclose(a["largest_grad"], h["largest_grad"], rel_tol=tol * 10), (mode, a, h)
    scales = {r["scale"] for r in hand_rec[0]}
    if mode == "O1":
        assert scales == {65536.0}, scales  # no step skipped: the gradients were unscaled once
    else:
        assert 65536.0 not in scales, scales  # fp32 and O0: no scaling
