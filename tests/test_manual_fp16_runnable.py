"""fixtures/runnable_manual/bert_fp16: a 2018-style hand-written fp16 fine-tuning loop, run on the CPU.

The real CLI rewrites the legacy script; the result must equal the hand migration byte for byte, so the
tool's migration and the hand one train identically. Against the original:
- fp32 (no flag): the same program, so the per-step losses are equal exactly.
- `--fp16`: the original trains fp16 weights (rounded copies of fp32 master weights) in fp16 throughout;
  the migration trains the fp32 weights under autocast. The losses differ by fp16 rounding (about 3e-5
  relative on this model over 12 steps); the tolerance is 1e-3 relative, and both take the same number
  of optimizer steps (no step overflows at the default scale 128).
"""
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "runnable_manual",
                    "bert_fp16")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(ROOT)))
FP16_RTOL = 1e-3


def _read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as fh:
        return fh.read()


@pytest.fixture(scope="module")
def migrated(tmp_path_factory):
    """The legacy script as `apex2amp rewrite` leaves it."""
    dst = tmp_path_factory.mktemp("bert_fp16") / "legacy"
    shutil.copytree(os.path.join(ROOT, "legacy"), dst)
    proc = subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(dst / "train.py")], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": REPO})
    assert proc.returncode == 1, proc.stdout + proc.stderr  # 1: a file was changed
    assert "A2A506" in proc.stdout
    return (dst / "train.py").read_text(encoding="utf-8")


def _train(source, tmp_path, tag, *args):
    """(per-step losses, optimizer steps) of `source` run on the CPU (autocast/GradScaler "cuda" -> "cpu")."""
    path = tmp_path / f"{tag}.py"
    path.write_text(source.replace('"cuda"', '"cpu"'), encoding="utf-8")
    proc = subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    losses = [float(v) for v in re.findall(r"loss ([-0-9.naninf]+)", proc.stdout)]
    steps = int(re.search(r"optimizer steps (\d+)", proc.stdout).group(1))
    return losses, steps


def test_rewrite_equals_the_hand_migration(migrated):
    assert migrated == _read("migrated", "train.py")


def test_fp32_mode_trains_exactly_as_before(migrated, tmp_path):
    legacy = _train(_read("legacy", "train.py"), tmp_path, "legacy")
    assert len(legacy[0]) == 12 and legacy[1] == 6
    assert _train(migrated, tmp_path, "migrated") == legacy


def test_fp16_mode_matches_within_fp16_rounding(migrated, tmp_path):
    legacy, legacy_steps = _train(_read("legacy", "train.py"), tmp_path, "legacy", "--fp16")
    ours, our_steps = _train(migrated, tmp_path, "migrated", "--fp16")
    assert len(legacy) == len(ours) == 12
    assert legacy_steps == our_steps == 6
    for a, b in zip(legacy, ours):
        assert abs(a - b) <= FP16_RTOL * max(1.0, abs(a)), (legacy, ours)
