"""fixtures/runnable_manual/fused_fp16_regression: SpanBERT's run_glue regression path, apex < 0.1's
FP16_Optimizer around FusedAdam(bias_correction=False, max_grad_norm=1.0) with `model.half()` and the float
labels cast `.half()` under --fp16 (`L = torch.tensor(..., dtype=torch.float)` then `if args.fp16: L = L.half()`,
for the training set and for the evaluation labels), MSELoss on one logit, run on the CPU.

The real CLI rewrites the legacy script (A2A501, A2A306, A2A504 for the model cast and for each label cast: the
labels stay fp32); the result must equal the hand migration byte for byte. The legacy side runs against the CPU
stand-in of apex < 0.1 (fixtures/runnable_manual/fused_fp16_optimizer/apex_stand_in). Against the original:
- fp32 (no flag): the same program, per-step losses and the evaluation equal exactly.
- `--fp16` (dynamic) and `--fp16 --loss_scale 128` (static): fp16 weights from fp32 masters and fp16 labels
  before, fp32 weights under autocast and fp32 labels after (MSELoss runs in fp32 under autocast); the losses
  differ by fp16 rounding (tolerance 2e-3 relative), both take 12 steps, and the dynamic run skips its first
  overflowing step on both sides (the scale ends at 2**15).
- The saved model is loaded again and cast `.half()` under --fp16 (kept: a model built afresh for evaluation);
  its MSE against the evaluation labels (fp16 before, fp32 after: MSELoss promotes the fp16 logits) is compared
  as the losses are.
"""
import os
import re
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "runnable_manual")
ROOT = os.path.join(HERE, "fused_fp16_regression")
STAND_IN = os.path.join(HERE, "fused_fp16_optimizer", "apex_stand_in")
REPO = os.path.dirname(os.path.dirname(HERE))
FP16_RTOL = 2e-3


def _read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as fh:
        return fh.read()


@pytest.fixture(scope="module")
def migrated(tmp_path_factory):
    """The legacy script as `apex2amp rewrite` leaves it, and what the rewrite printed."""
    dst = tmp_path_factory.mktemp("fused_fp16_regression") / "legacy"
    shutil.copytree(os.path.join(ROOT, "legacy"), dst)
    proc = subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(dst / "train.py")], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": REPO})
    assert proc.returncode == 1, proc.stdout + proc.stderr  # 1: a file was changed
    assert proc.stdout.count("A2A504") == 3, proc.stdout  # the model cast and the two label casts
    assert proc.stdout.count("the labels stay fp32") == 2, proc.stdout
    for code in ("A2A501", "A2A503", "A2A306"):
        assert code in proc.stdout, proc.stdout
    for code in ("A2A301", "A2A304", "A2A502"):
        assert code not in proc.stdout, proc.stdout
    return (dst / "train.py").read_text(encoding="utf-8")


def _train(source, tmp_path, tag, *args):
    """(per-step losses + eval logits sum + eval loss, optimizer steps, overflows, final scale or None)."""
    if "scaler.update()" in source:
        source = source.replace('    print(f"optimizer steps {global_step}")',
                                '    print(f"optimizer steps {global_step}")\n    print(f"scale {scaler.get_scale()}")')
    path = tmp_path / f"{tag}.py"
    path.write_text(source.replace('"cuda"', '"cpu"'), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": STAND_IN}
    proc = subprocess.run([sys.executable, str(path), "--do_eval", "--output_dir", str(tmp_path), *args],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    losses = [float(v) for v in re.findall(r"^step \d+ loss ([-0-9.naninf]+)", proc.stdout, re.M)]
    steps = int(re.search(r"optimizer steps (\d+)", proc.stdout).group(1))
    scale = re.search(r"^scale ([0-9.]+)", proc.stdout, re.M)
    ev = re.search(r"eval logits ([-0-9.]+) dtype (\S+)", proc.stdout)
    assert ev.group(2) == ("torch.float16" if "--fp16" in args else "torch.float32"), proc.stdout
    losses.append(float(ev.group(1)))
    losses.append(float(re.search(r"eval loss ([-0-9.]+)", proc.stdout).group(1)))
    return losses, steps, proc.stdout.count("Grad overflow"), float(scale.group(1)) if scale else None


def _close(a, b):
    return len(a) == len(b) and all(abs(x - y) <= FP16_RTOL * max(1.0, abs(x)) for x, y in zip(a, b))


def test_rewrite_equals_the_hand_migration(migrated):
    assert migrated == _read("migrated", "train.py")
    assert ".half()" not in migrated.split("def main():")[1].split("if args.do_eval:")[0]  # none before the eval


def test_fp32_mode_trains_exactly_as_before(migrated, tmp_path):
    legacy = _train(_read("legacy", "train.py"), tmp_path, "legacy")
    assert len(legacy[0]) == 26 and legacy[1] == 12
    assert _train(migrated, tmp_path, "migrated")[:3] == legacy[:3]


@pytest.mark.parametrize("mode,overflows,scale", [((), 1, 2.0 ** 15), (("--loss_scale", "128"), 0, 128.0)],
                         ids=["dynamic", "static"])
def test_fp16_mode_matches_within_fp16_rounding(migrated, tmp_path, mode, overflows, scale):
    legacy, legacy_steps, legacy_overflows, _ = _train(_read("legacy", "train.py"), tmp_path, "legacy", "--fp16", *mode)
    ours, our_steps, _, our_scale = _train(migrated, tmp_path, "migrated", "--fp16", *mode)
    assert len(legacy) == len(ours) == 26
    assert legacy_steps == our_steps == 12
    assert legacy_overflows == overflows and our_scale == scale
    assert _close(legacy, ours), (legacy, ours)
