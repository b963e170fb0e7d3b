"""The hand migration an A2A502 finding spells out for a script that uses its own copy of apex's FP16_Optimizer
(a module-level `optim = FP16_Optimizer(...)` over an FP16_Module model, `optim.overflow` / `optim.loss_scale`
read in the loop, the optimizer state saved and resumed) runs like the legacy script, step by step: fp32,
static scale and dynamic scale, straight and through save + resume. The twin follows the finding's lines, and
the test checks that the finding still names them. On CPU (fp16 model vs autocast fp16: same scale, same
skipped steps, losses within 1%)."""
import json
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASE = os.path.join(HERE, "fixtures", "runnable_vendored_fp16")
STEPS, CUT = 30, 14
MODES = {"fp32": [], "static": ["--fp16", "--loss-scale", "128"], "dynamic": ["--fp16", "--dynamic-loss-scale"]}


def _run(side, args, tmp_path):
    proc = subprocess.run([sys.executable, "train.py", *args], cwd=os.path.join(CASE, side), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [(int(s), float(loss), float(scale), int(sk)) for s, loss, scale, sk in
            re.findall(r"step (\d+) loss ([-0-9.e]+) scale ([-0-9.e+]+) skipped (\d+)", proc.stdout)]


def _curve(side, mode, tmp_path, resume):
    args = MODES[mode]
    if not resume:
        return _run(side, args + ["--steps", str(STEPS)], tmp_path)
    ckpt = str(tmp_path / f"{side}-{mode}.pt")
    first = _run(side, args + ["--steps", str(CUT), "--save", ckpt], tmp_path)
    return first + _run(side, args + ["--steps", str(STEPS), "--load", ckpt], tmp_path)


@pytest.mark.parametrize("resume", [False, True])
@pytest.mark.parametrize("mode", sorted(MODES))
def test_the_hand_migration_runs_like_the_vendored_fp16_optimizer(mode, resume, tmp_path):
    legacy = _curve("legacy", mode, tmp_path, resume)
    hand = _curve("migrated", mode, tmp_path, resume)
    assert len(legacy) == len(hand) == STEPS
    rel = 1e-6 if mode == "fp32" else 1e-2
    for a, b in zip(legacy, hand):
        assert a[0] == b[0] and a[2] == b[2] and a[3] == b[3], (a, b)  # step, scale, skipped count
        assert b[1] == pytest.approx(a[1], rel=rel, abs=1e-6), (a, b)
    if mode == "dynamic":
        assert legacy[-1][2] < 2.0 ** 32 and legacy[-1][3] > 0 or resume  # overflows were skipped


def test_the_finding_names_the_lines_the_twin_follows():
    res = subprocess.run([sys.executable, "-m", "migrate", "check", "--format", "json", "--no-cache",
                          os.path.join(CASE, "legacy")], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": HERE})
    assert res.returncode == 1, res.stdout + res.stderr
    files = {os.path.relpath(r["path"], os.path.join(CASE, "legacy")): r["findings"]
             for r in json.loads(res.stdout)["files"]}
    (msg,) = [f["message"] for f in files["train.py"] if f["code"] == "A2A502"]
    for part in ('GradScaler("cuda", init_scale=2.0**32 if args.dynamic_loss_scale else args.loss_scale, '
                 "growth_interval=1000 if args.dynamic_loss_scale else 2**30)",
                 "with enabled=args.fp16",
                 "`FP16_Module(model)` -> `model`",
                 "`optim.backward(loss, update_master_grads=False)` -> `scaler.scale(loss).backward()`",
                 "`optim.update_master_grads()` -> removed",
                 "`optim.clip_master_grads(1.0)` -> `scaler.unscale_(optim)` then `torch.nn.utils.clip_grad_norm_(",
                 "`optim.step()` -> `scale_before = scaler.get_scale(); scaler.step(optim); scaler.update()`",
                 "`optim.overflow` -> `scaler.get_scale() < scale_before`",
                 "`optim.loss_scale` -> `scaler.get_scale()`",
                 "save `scaler.state_dict()` beside it",
                 "`if scaler.get_scale() < 1: scaler.update(1.0)`"):
        assert part in msg, (part, msg)
    # the vendored class's own finding (A2A512) says who still imports it
    assert any(f["code"] == "A2A512" and "Still imported by train.py:" in f["message"] for f in files["fp16/fp16.py"])
