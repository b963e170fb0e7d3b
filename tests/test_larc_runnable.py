"""apex.parallel.LARC end to end: fixtures/runnable/larc/legacy (LARC around SGD with weight decay and
momentum, apex amp at --opt-level, a checkpoint) is rewritten with the real CLI (A2A225: a LARC class
added to the file); the output, the hand migration (a LARC written by hand in larc.py, torch.amp) and the
legacy script on the apex emulation print the same steps in fp32, O1 and O2, with clip on and off, through
an overflow (the step skipped on every side) and through save + resume."""
import ast
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

torch = pytest.importorskip("torch")

from migrate.verify.runner import run_side  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "runnable", "larc")
LINE = re.compile(r"^step (\d+) loss (\S+) wsum (\S+)$")
STEPS = 6
MODES = [(), ("--opt-level", "O1"), ("--opt-level", "O2")]
VARIANTS = [(), ("--clip", "--trust", "0.5"), ("--poison-step", "2")]


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory):
    dst = tmp_path_factory.mktemp("larc")
    shutil.copytree(os.path.join(ROOT, "legacy"), dst, dirs_exist_ok=True)
    res = subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(dst)], capture_output=True, text=True)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "A2A225" in res.stdout and "A2A220" not in res.stdout and "A2A118" not in res.stdout, res.stdout
    text = (dst / "train.py").read_text()
    tree = ast.parse(text)
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and "apex" in (n.module or "")], text
    assert [n.name for n in tree.body if isinstance(n, ast.ClassDef)] == ["LARC"], text
    again = subprocess.run([sys.executable, "-m", "migrate", "rewrite", "--diff", str(dst)], capture_output=True,
                           text=True)
    assert again.stdout.count("+++") == 0, again.stdout
    return str(dst)


@functools.lru_cache(maxsize=None)
def _run(folder, args, cwd=None):
    side = run_side(folder, "train.py", ["--steps", str(STEPS), *args], steps=100, device="cpu",
                    apex="emulated", cwd=cwd)
    assert side.returncode == 0, side.output
    steps = [LINE.match(ln).groups() for ln in side.output.splitlines() if LINE.match(ln)]
    dtype = [ln for ln in side.output.splitlines() if ln.startswith("out dtype")]
    return [(int(i), float(loss), float(w)) for i, loss, w in steps], dtype[-1]


def _resumed(folder, args):
    """Steps 3.. of a run saved after step 3 and resumed from that checkpoint (its own folder)."""
    work = tempfile.mkdtemp()
    ckpt = os.path.join(work, "ckpt.pt")
    first, _ = _run(folder, args + ("--save-at", "3", "--ckpt", ckpt), cwd=work)
    second, _ = _run(folder, args + ("--resume", ckpt), cwd=work)
    return first[:3] + second


@pytest.mark.parametrize("variant", VARIANTS, ids=["sgd", "clip", "overflow"])
@pytest.mark.parametrize("mode", MODES, ids=["fp32", "O1", "O2"])
def test_rewritten_matches_hand_migration(rewritten, mode, variant):
    if variant and variant[0] == "--poison-step" and not mode:
        pytest.skip("an inf loss in fp32 has no scaler to skip the step")
    tool, hand = _run(rewritten, mode + variant), _run(os.path.join(ROOT, "migrated"), mode + variant)
    assert len(hand[0]) == STEPS
    assert tool == hand
    assert hand[1] == ("out dtype torch.float16" if mode else "out dtype torch.float32")


@pytest.mark.parametrize("variant", VARIANTS, ids=["sgd", "clip", "overflow"])
@pytest.mark.parametrize("mode", MODES, ids=["fp32", "O1", "O2"])
def test_legacy_on_apex_emulation_agrees(rewritten, mode, variant):
    """fp32: the same numbers; O1 / O2 (apex: fp16 model, fp32 master weights): close."""
    if variant and variant[0] == "--poison-step" and not mode:
        pytest.skip("an inf loss in fp32 has no scaler to skip the step")
    old, _ = _run(os.path.join(ROOT, "legacy"), mode + variant)
    new, _ = _run(rewritten, mode + variant)
    assert len(old) == len(new) == STEPS
    rel = 1e-9 if not mode else 2e-3
    for (i, lo, wo), (j, ln, wn) in zip(old, new):
        assert i == j
        if lo != lo or abs(lo) == float("inf"):
            assert ln != ln or abs(ln) == float("inf")
        else:
            assert lo == pytest.approx(ln, rel=rel), (mode, variant, i)
        assert wo == pytest.approx(wn, rel=rel), (mode, variant, i)


def test_overflow_skips_the_whole_larc_step(rewritten):
    """The poisoned step changes no weight on either side (LARC's weight decay is not applied either)."""
    for folder in (rewritten, os.path.join(ROOT, "legacy")):
        steps, _ = _run(folder, ("--opt-level", "O1", "--poison-step", "2"))
        assert steps[2][2] == steps[1][2]
        assert steps[3][2] != steps[2][2]


@pytest.mark.parametrize("mode", MODES, ids=["fp32", "O1", "O2"])
def test_save_and_resume(rewritten, mode):
    full, _ = _run(rewritten, mode)
    assert _resumed(rewritten, mode) == full
    assert _resumed(os.path.join(ROOT, "migrated"), mode) == full
