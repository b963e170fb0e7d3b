"""End to end: an evaluation script whose models apex initialized for inference only (`[m] =
amp.initialize([m], opt_level=...)`, one call per model, no optimizer) is rewritten with the real CLI;
the output and the hand migration (autocast around each forward) print the same scores in fp32 and in
fp16, and both stay close to the legacy script under the apex emulation."""
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
                    "inference_list")
SCORE = re.compile(r"^(answer|rationale) \d+ [-\d. ]+$")


@functools.lru_cache(maxsize=None)
def _run(folder, args):
    return run_side(folder, "score.py", list(args), steps=1, device="cpu", apex="emulated")


def _scores(folder, args):
    side = _run(folder, tuple(args))
    assert side.returncode == 0, side.output
    lines = [ln for ln in side.output.splitlines() if SCORE.match(ln)]
    assert len(lines) == 8, side.output
    return lines


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory):
    dst = tmp_path_factory.mktemp("inference_list")
    shutil.copytree(os.path.join(ROOT, "legacy"), dst, dirs_exist_ok=True)
    res = subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(dst)], capture_output=True, text=True)
    assert res.returncode == 1, res.stdout + res.stderr
    text = (dst / "score.py").read_text()
    imported = {n.module for n in ast.walk(ast.parse(text)) if isinstance(n, ast.ImportFrom)}
    assert "apex" not in imported and "amp.initialize(" not in text, text
    assert text.count("autocast_forward(") == 3, text  # the helper and one patch per model
    again = subprocess.run([sys.executable, "-m", "migrate", "rewrite", "--diff", str(dst)], capture_output=True,
                           text=True)
    assert again.stdout.count("+++") == 0, again.stdout
    return str(dst)


@pytest.mark.parametrize("args", [[], ["--fp16"]], ids=["fp32", "fp16"])
def test_rewritten_scores_match_hand_migration(rewritten, args):
    assert _scores(rewritten, args) == _scores(os.path.join(ROOT, "migrated"), args)


@pytest.mark.parametrize("args,tol", [([], 0.0), (["--fp16"], 5e-3)], ids=["fp32", "fp16"])
def test_rewritten_scores_stay_close_to_apex(rewritten, args, tol):
    def values(lines):
        return [float(v) for ln in lines for v in ln.split()[2:]]
    tool, legacy = values(_scores(rewritten, args)), values(_scores(os.path.join(ROOT, "legacy"), args))
    assert max(abs(a - b) for a, b in zip(tool, legacy)) <= tol
