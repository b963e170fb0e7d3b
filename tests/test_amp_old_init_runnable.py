"""End to end: an evaluation script on apex's old `amp.init(enabled=...)` API (its inference loop in
another module) is rewritten with the real CLI; the output and the hand migration (the rest of `main`
under one autocast region) print the same scores in fp32 and in fp16, and fp16 really runs mixed."""
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

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "runnable", "old_init")
LINE = re.compile(r"^(batch \d+ [-\d. ]+|matmul dtype \S+)$")


@functools.lru_cache(maxsize=None)
def _run(folder, args):
    side = run_side(folder, "test_net.py", list(args), steps=1, device="cpu", apex="emulated")
    assert side.returncode == 0, side.output
    lines = [ln for ln in side.output.splitlines() if LINE.match(ln)]
    assert len(lines) == 4, side.output
    return lines


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory):
    dst = tmp_path_factory.mktemp("old_init")
    shutil.copytree(os.path.join(ROOT, "legacy"), dst, dirs_exist_ok=True)
    res = subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(dst)], capture_output=True, text=True)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "A2A180" in res.stdout and "A2A115" not in res.stdout, res.stdout
    text = (dst / "test_net.py").read_text()
    assert "apex" not in {n.module for n in ast.walk(ast.parse(text)) if isinstance(n, ast.ImportFrom)}, text
    again = subprocess.run([sys.executable, "-m", "migrate", "rewrite", "--diff", str(dst)], capture_output=True,
                           text=True)
    assert again.stdout.count("+++") == 0, again.stdout
    return str(dst)


@pytest.mark.parametrize("args", [(), ("--dtype", "float16")], ids=["fp32", "fp16"])
def test_rewritten_matches_hand_migration(rewritten, args):
    assert _run(rewritten, args) == _run(os.path.join(ROOT, "migrated"), args)


def test_fp16_stays_mixed(rewritten):
    fp32, fp16 = _run(rewritten, ()), _run(rewritten, ("--dtype", "float16"))
    assert fp32[-1] == "matmul dtype torch.float32" and fp16[-1] == "matmul dtype torch.float16"
    assert fp32[:-1] != fp16[:-1]
