"""The BERT-era `try: from apex.normalization.fused_layer_norm import FusedLayerNorm as BertLayerNorm` /
`except ImportError: class BertLayerNorm(...)` guard, with another module importing BertLayerNorm from
it: the real CLI rewrites fixtures/runnable/bert_layer_norm/legacy (the guard becomes `BertLayerNorm =
nn.LayerNorm`, A2A310; no apex import left); the output equals the hand migration in fp32, O1 and O2, and
the legacy program on the apex emulation agrees (fp32: the same numbers; mixed: close)."""
import ast
import functools
import os
import re
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from migrate.verify.runner import run_side  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "runnable",
                    "bert_layer_norm")
LINE = re.compile(r"^step (\d+) loss (\S+) wsum (\S+)$")
MODES = [(), ("--opt-level", "O1"), ("--opt-level", "O2")]


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory):
    dst = tmp_path_factory.mktemp("bert_layer_norm")
    shutil.copytree(os.path.join(ROOT, "legacy"), dst, dirs_exist_ok=True)
    res = subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(dst)], capture_output=True, text=True)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "A2A118" not in res.stdout and "`BertLayerNorm = nn.LayerNorm`" in res.stdout, res.stdout
    for name in ("modeling.py", "train.py", "heads.py"):
        tree = ast.parse((dst / name).read_text())
        assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                    and "apex" in ast.unparse(n)], name
    assert not [n for n in ast.walk(ast.parse((dst / "modeling.py").read_text())) if isinstance(n, ast.Try)]
    again = subprocess.run([sys.executable, "-m", "migrate", "rewrite", "--diff", str(dst)], capture_output=True,
                           text=True)
    assert again.stdout.count("+++") == 0, again.stdout
    return str(dst)


@functools.lru_cache(maxsize=None)
def _run(folder, args):
    side = run_side(folder, "train.py", list(args), steps=100, device="cpu", apex="emulated")
    assert side.returncode == 0, side.output
    lines = side.output.splitlines()
    steps = [LINE.match(ln).groups() for ln in lines if LINE.match(ln)]
    tail = [ln for ln in lines if ln.startswith(("norm ", "out dtype"))]
    return [(int(i), float(loss), float(w)) for i, loss, w in steps], tail


@pytest.mark.parametrize("mode", MODES, ids=["fp32", "O1", "O2"])
def test_rewritten_matches_hand_migration(rewritten, mode):
    tool, hand = _run(rewritten, mode), _run(os.path.join(ROOT, "migrated"), mode)
    assert len(hand[0]) == 5
    assert tool == hand
    assert hand[1] == ["norm LayerNorm LayerNorm", "out dtype " + ("torch.float16" if mode else "torch.float32")]


@pytest.mark.parametrize("mode", MODES, ids=["fp32", "O1", "O2"])
def test_legacy_on_apex_emulation_agrees(rewritten, mode):
    old, tail = _run(os.path.join(ROOT, "legacy"), mode)
    new, _ = _run(rewritten, mode)
    assert tail[0] == "norm FusedLayerNorm FusedLayerNorm"  # the legacy side really ran apex's class
    rel = 1e-9 if not mode else 5e-3
    assert len(old) == len(new) == 5
    for (i, lo, wo), (j, ln, wn) in zip(old, new):
        assert i == j and lo == pytest.approx(ln, rel=rel) and wo == pytest.approx(wn, rel=rel), (mode, i)
