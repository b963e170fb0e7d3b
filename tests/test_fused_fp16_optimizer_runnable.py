"""fixtures/runnable_manual/fused_fp16_optimizer: a pytorch-pretrained-bert era fine-tuning loop with apex < 0.1's
FP16_Optimizer wrapping FusedAdam (`if args.fp16: model.half()`, `optimizer.backward(loss)` under the flag, a
warmup written into the param groups, gradient accumulation), run on the CPU.

The real CLI rewrites the legacy script; the result must equal the hand migration byte for byte. The legacy
side runs against a CPU stand-in of apex < 0.1 (fixtures/.../apex_stand_in: FusedAdam's step with grads=,
output_params=, scale=, and the wrapper's fp32 master copies and loss scaler). Against the original:
- fp32 (no flag): the same program, so the per-step losses are equal exactly.
- `--fp16` (dynamic scale) and `--fp16 --loss_scale 128` (static): the original trains fp16 weights copied
  from fp32 masters, the migration the fp32 weights under autocast; the losses differ by fp16 rounding
  (about 2e-5 on this model over 16 micro-batches; tolerance 1e-3 relative) and both take 8 steps.
"""
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "runnable_manual",
                    "fused_fp16_optimizer")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(ROOT)))
FP16_RTOL = 1e-3


def _read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as fh:
        return fh.read()


@pytest.fixture(scope="module")
def migrated(tmp_path_factory):
    """The legacy script as `apex2amp rewrite` leaves it."""
    dst = tmp_path_factory.mktemp("fused_fp16_optimizer") / "legacy"
    shutil.copytree(os.path.join(ROOT, "legacy"), dst)
    proc = subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(dst / "train.py")], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": REPO})
    assert proc.returncode == 1, proc.stdout + proc.stderr  # 1: a file was changed
    for code in ("A2A501", "A2A503", "A2A504", "A2A301"):
        assert code in proc.stdout, proc.stdout
    return (dst / "train.py").read_text(encoding="utf-8")


def _train(source, tmp_path, tag, *args):
    """(per-step losses, optimizer steps) of `source` run on the CPU (autocast/GradScaler "cuda" -> "cpu");
    the legacy side imports the apex < 0.1 stand-in."""
    path = tmp_path / f"{tag}.py"
    path.write_text(source.replace('"cuda"', '"cpu"'), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "apex_stand_in")}
    proc = subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "Grad overflow" not in proc.stdout
    losses = [float(v) for v in re.findall(r"loss ([-0-9.naninf]+)", proc.stdout)]
    steps = int(re.search(r"optimizer steps (\d+)", proc.stdout).group(1))
    return losses, steps


def test_rewrite_equals_the_hand_migration(migrated):
    assert migrated == _read("migrated", "train.py")


def test_fp32_mode_trains_exactly_as_before(migrated, tmp_path):
    legacy = _train(_read("legacy", "train.py"), tmp_path, "legacy")
    assert len(legacy[0]) == 16 and legacy[1] == 8
    assert _train(migrated, tmp_path, "migrated") == legacy


@pytest.mark.parametrize("mode", [(), ("--loss_scale", "128")], ids=["dynamic", "static"])
def test_fp16_mode_matches_within_fp16_rounding(migrated, tmp_path, mode):
    legacy, legacy_steps = _train(_read("legacy", "train.py"), tmp_path, "legacy", "--fp16", *mode)
    ours, our_steps = _train(migrated, tmp_path, "migrated", "--fp16", *mode)
    assert len(legacy) == len(ours) == 16
    assert legacy_steps == our_steps == 8
    for a, b in zip(legacy, ours):
        assert abs(a - b) <= FP16_RTOL * max(1.0, abs(a)), (legacy, ours)
    fp32, _ = _train(_read("legacy", "train.py"), tmp_path, "fp32")
    assert ours != fp32  # the fp16 run took the fp16 path (its warmup and autocast)


def test_hand_migration_uses_a_scaler_in_fp16_mode(tmp_path):
    """The migrated script's scaler is live under --fp16: its scale starts at 2**16 (dynamic) or the static
    scale, and no step overflows."""
    src = _read("migrated", "train.py").replace(
        '    print(f"optimizer steps {global_step}")',
        '    print(f"optimizer steps {global_step}")\n    print(f"scale {scaler.get_scale()}")')
    for args, scale in ((("--fp16",), 2.0 ** 16), (("--fp16", "--loss_scale", "128"), 128.0)):
        path = tmp_path / "scale.py"
        path.write_text(src.replace('"cuda"', '"cpu"'), encoding="utf-8")
        proc = subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert f"scale {scale}" in proc.stdout, proc.stdout
