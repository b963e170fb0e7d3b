"""Runnable check of yolov3's shape: `if not torch.isfinite(loss): ...; return results` between the loss and
its backward, with gradient accumulation. The autocast region covers the forward, the loss, the check and the
rescale (the `return` leaves the `with` block, and nothing before it in the iteration has stepped). The legacy
script on the apex emulation, its rewrite by the CLI and its hand migration run under the verify probe,
compared step by step in fp32, O0, O1 and O2, with and without a non-finite batch that fires the exit."""
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
                    "finite_loss_exit")
MODES = {"fp32": [], "O0": ["--fp16", "--opt-level", "O0"], "O1": ["--fp16", "--opt-level", "O1"],
         "O2": ["--fp16", "--opt-level", "O2"], "O1-exit-fires": ["--fp16", "--poison-at", "7"],
         "fp32-exit-fires": ["--poison-at", "7"]}
TOL = {"fp32": 0.0, "O0": 0.0, "O1": 1e-5, "O2": 2e-2, "O1-exit-fires": 1e-5, "fp32-exit-fires": 0.0}


@pytest.fixture(scope="module")
def tool(tmp_path_factory):
    dst = tmp_path_factory.mktemp("finite_loss_exit")
    shutil.copytree(os.path.join(ROOT, "legacy"), dst, dirs_exist_ok=True)
    res = subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(dst)], capture_output=True, text=True)
    assert res.returncode == 1, res.stdout + res.stderr
    text = (dst / "train.py").read_text()
    assert "from apex" not in text and "amp.scale_loss" not in text and text.count("with torch.autocast(") == 1, text
    again = subprocess.run([sys.executable, "-m", "migrate", "rewrite", "--diff", str(dst)], capture_output=True,
                           text=True)
    assert again.stdout.count("+++") == 0, again.stdout
    return str(dst)


def _run(folder, args, log):
    records = collect_losses(folder, "train.py", ["--log", str(log), *args], steps=1000, device="cpu")
    with open(log, encoding="utf-8") as fh:
        return records[0], [json.loads(line) for line in fh]


def _close(a, b, tol):
    return a == b if tol == 0.0 else math.isclose(a, b, rel_tol=tol, abs_tol=tol)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_finite_loss_exit_step_by_step(tool, mode, tmp_path):
    args = MODES[mode]
    legacy_rec, legacy = _run(os.path.join(ROOT, "legacy"), args, tmp_path / "legacy.jsonl")
    hand_rec, hand = _run(os.path.join(ROOT, "migrated"), args, tmp_path / "hand.jsonl")
    tool_rec, tool_log = _run(tool, args, tmp_path / "tool.jsonl")
    fires = "--poison-at" in args
    assert len(legacy) == len(hand) == len(tool_log) == (8 if fires else 12)
    assert tool_log == hand  # the rewrite and the hand migration compute the same thing
    strip = [[(r["losses"], r["skipped"], r["scale"]) for r in recs] for recs in (tool_rec, hand_rec, legacy_rec)]
    assert strip[0] == strip[1]
    assert len(strip[1]) == (3 if fires else 6)  # a step every second batch, none after the exit

    def steps(recs):
        return [(s, 1.0 if c is None else c) for _, s, c in recs]

    assert steps(strip[2]) == steps(strip[1])
    tol = TOL[mode]
    for a, h in zip(legacy, hand):
        assert a.keys() == h.keys()
        for k in a:
            if k == "results":
                assert _close(a[k][0], h[k][0], tol) and a[k][1] == h[k][1], (mode, a, h)
            elif k != "ended":
                assert _close(a[k], h[k], tol), (mode, k, a, h)
    if fires:
        assert hand[-1]["ended"] and hand[-1]["it"] == 7 and hand[-1]["results"][1] == 7
