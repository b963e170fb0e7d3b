"""Runnable twins of fixtures/runnable_manual: the real CLI rewrites the legacy script, which must
match the hand-checked twin, and (where the legacy side runs without apex) give the same per-step losses."""
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "runnable_manual")


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "migrate", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.path.dirname(ROOT.rsplit(os.sep, 1)[0])})


def _rewrite_legacy(name, tmp_path):
    dst = tmp_path / name
    shutil.copytree(os.path.join(ROOT, name, "legacy"), dst)
    proc = _cli("rewrite", "-q", str(dst / "train.py"))
    assert proc.returncode == 1, proc.stdout + proc.stderr  # 1: files were changed
    return (dst / "train.py").read_text()


def _run_on_cpu(source, tmp_path, tag):
    cpu = source.replace('"cuda"', '"cpu"')  # autocast/GradScaler "cuda" -> "cpu" (CPU-only CI)
    path = tmp_path / f"{tag}.py"
    path.write_text(cpu)
    proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [float(v) for v in re.findall(r"loss ([-0-9.naninf]+)", proc.stdout)]


@pytest.mark.parametrize("name", ["static_scale", "fp16_optimizer"])
def test_rewrite_matches_twin(name, tmp_path):
    got = _rewrite_legacy(name, tmp_path)
    with open(os.path.join(ROOT, name, "migrated", "train.py"), encoding="utf-8") as fh:
        assert got == fh.read()


def test_static_scale_losses_match_legacy(tmp_path):
    with open(os.path.join(ROOT, "static_scale", "legacy", "train.py"), encoding="utf-8") as fh:
        legacy = _run_on_cpu(fh.read(), tmp_path, "legacy")
    migrated = _run_on_cpu(_rewrite_legacy("static_scale", tmp_path), tmp_path, "migrated")
    assert len(legacy) == len(migrated) == 8
    for a, b in zip(legacy, migrated):
        assert abs(a - b) <= 1e-5 * max(1.0, abs(a)), (legacy, migrated)


def test_fp16_optimizer_twin_trains_on_cpu(tmp_path):
    with open(os.path.join(ROOT, "fp16_optimizer", "migrated", "train.py"), encoding="utf-8") as fh:
        losses = _run_on_cpu(fh.read(), tmp_path, "twin")
    assert len(losses) == 30
    assert all(v == v and abs(v) < 1e4 for v in losses)
    assert losses[-1] < losses[0]
