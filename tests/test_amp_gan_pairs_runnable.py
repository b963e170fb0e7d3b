"""Runnable check of several `amp.initialize` calls in one block, one per network / optimizer pair
(vid2vid's shape: the generator with its optimizer, the discriminator with its frame and temporal
optimizers), sharing apex's one loss scaler: the legacy GAN runs on the apex emulation, its rewrite by the
CLI and its hand migration (one GradScaler stepped and updated after each of the three losses) under the
verify probe, compared step by step (losses, skipped steps, loss scale, weight checksums) in fp32, O0, O1,
O2 and with the generator's fp16 gradients overflowing."""
import json
import math
import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from migrate.verify import collect_losses  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "runnable",
                    "gan_pairs")
MODES = {"fp32": [], "O0": ["--fp16", "--opt-level", "O0"], "O1": ["--fp16", "--opt-level", "O1"],
         "O2": ["--fp16", "--opt-level", "O2"], "O1-generator-overflows": ["--fp16", "--g-weight", "3e4"]}
# the emulation's O1 runs the same cast engine as autocast; its O2 keeps fp16 weights with fp32 masters
TOL = {"fp32": 0.0, "O0": 0.0, "O1": 1e-5, "O2": 2e-2, "O1-generator-overflows": 1e-5}


@pytest.fixture(scope="module")
def tool(tmp_path_factory):
    dst = tmp_path_factory.mktemp("gan_pairs")
    shutil.copytree(os.path.join(ROOT, "legacy"), dst, dirs_exist_ok=True)
    res = subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(dst)], capture_output=True, text=True)
    assert res.returncode == 1, res.stdout + res.stderr
    text = (dst / "train_gan.py").read_text()
    assert "from apex" not in text and "amp.initialize(" not in text and text.count("torch.amp.GradScaler(") == 1, text
    again = subprocess.run([sys.executable, "-m", "migrate", "rewrite", "--diff", str(dst)], capture_output=True,
                           text=True)
    assert again.stdout.count("+++") == 0, again.stdout
    return str(dst)


def _run(folder, args, log):
    records = collect_losses(folder, "train_gan.py", ["--log", str(log), *args], steps=1000, device="cpu")
    with open(log, encoding="utf-8") as fh:
        return records[0], [json.loads(line) for line in fh]


def _close(a, b, tol):
    return a == b if tol == 0.0 else math.isclose(a, b, rel_tol=tol, abs_tol=tol)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_gan_pairs_share_one_scaler_step_by_step(tool, mode, tmp_path):
    args = MODES[mode]
    legacy_rec, legacy = _run(os.path.join(ROOT, "legacy"), args, tmp_path / "legacy.jsonl")
    hand_rec, hand = _run(os.path.join(ROOT, "migrated"), args, tmp_path / "hand.jsonl")
    tool_rec, tool_log = _run(tool, args, tmp_path / "tool.jsonl")
    assert len(legacy) == len(hand) == len(tool_log) == 12
    assert tool_log == hand  # the rewrite and the hand migration compute the same thing
    strip = [[(r["losses"], r["skipped"], r["scale"]) for r in recs] for recs in (tool_rec, hand_rec, legacy_rec)]
    assert strip[0] == strip[1]
    assert len(strip[1]) == 36  # three optimizer steps an iteration
    # the one apex loss scaler against the one GradScaler: the same scale and skips at every step
    # (a disabled GradScaler has no scale where apex's O0 scaler held 1.0)
    def steps(recs):
        return [(s, 1.0 if c is None else c) for _, s, c in recs]

    assert steps(strip[2]) == steps(strip[1])
    tol = TOL[mode]
    for a, h in zip(legacy, hand):
        assert all(_close(a[k], h[k], tol) for k in ("loss_g", "loss_d", "loss_d_t", "g", "d")), (mode, a, h)
    skipped = [s for _, s, _ in strip[1]]
    if mode == "O1-generator-overflows":
        assert any(skipped) and not all(skipped)
        assert min(c for _, _, c in strip[1]) < 65536.0
    else:
        assert not any(skipped)
