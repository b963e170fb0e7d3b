"""Runnable check of a GAN whose discriminator loss is computed after the generator's backward-helper call,
from the generator's output (`fake.detach()`): the legacy script runs on the apex emulation, its rewrite by
the CLI and its hand migration (two autocast regions, the helper call between them) under the verify probe,
compared step by step (losses, skipped steps, loss scale, weight checksums) in fp32, O0, O1 and O2. Before
the fix the discriminator loss was left outside autocast: fp32 where apex O1 ran it in fp16."""
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
                    "gan_second_loss")
MODES = {"fp32": [], "O0": ["--fp16", "--opt-level", "O0"], "O1": ["--fp16", "--opt-level", "O1"],
         "O2": ["--fp16", "--opt-level", "O2"]}
# the emulation's O1 runs the same cast engine as autocast; its O2 keeps fp16 weights with fp32 masters
TOL = {"fp32": 0.0, "O0": 0.0, "O1": 1e-5, "O2": 2e-2}


@pytest.fixture(scope="module")
def tool(tmp_path_factory):
    dst = tmp_path_factory.mktemp("gan_second_loss")
    shutil.copytree(os.path.join(ROOT, "legacy"), dst, dirs_exist_ok=True)
    res = subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(dst)], capture_output=True, text=True)
    assert res.returncode == 1, res.stdout + res.stderr
    text = (dst / "train_gan.py").read_text()
    assert "from apex" not in text and "amp.scale_loss" not in text and text.count("with torch.autocast(") == 2, text
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
def test_second_loss_after_helper_step_by_step(tool, mode, tmp_path):
    args = MODES[mode]
    legacy_rec, legacy = _run(os.path.join(ROOT, "legacy"), args, tmp_path / "legacy.jsonl")
    hand_rec, hand = _run(os.path.join(ROOT, "migrated"), args, tmp_path / "hand.jsonl")
    tool_rec, tool_log = _run(tool, args, tmp_path / "tool.jsonl")
    assert len(legacy) == len(hand) == len(tool_log) == 12
    assert tool_log == hand  # the rewrite and the hand migration compute the same thing
    strip = [[(r["losses"], r["skipped"], r["scale"]) for r in recs] for recs in (tool_rec, hand_rec, legacy_rec)]
    assert strip[0] == strip[1]
    assert len(strip[1]) == 24  # two optimizer steps an iteration

    def steps(recs):
        return [(s, 1.0 if c is None else c) for _, s, c in recs]

    assert steps(strip[2]) == steps(strip[1])
    tol = TOL[mode]
    for a, h in zip(legacy, hand):
        assert all(_close(a[k], h[k], tol) for k in ("loss_g", "loss_d", "g", "d")), (mode, a, h)
