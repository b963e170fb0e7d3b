"""End to end: an inference script (waveglow's shape) that apex cast to pure fp16 with
`net, _ = amp.initialize(net, [], opt_level="O3")` and then ran through a method other than forward (`infer`,
also from a helper in another module that reads the weights' dtype) is rewritten with the real CLI to
`net.half()` plus apex's forward patch; the audio and the forward's scores equal the hand migration's and
the legacy script's under the apex emulation, bit for bit, in fp32 and in fp16."""
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
                    "o3_inference")
LINE = re.compile(r"^(audio|score) \d+ ")


@functools.lru_cache(maxsize=None)
def _run(folder, args):
    return run_side(folder, "synth.py", list(args), steps=1, device="cpu", apex="emulated")


def _lines(folder, args):
    side = _run(folder, tuple(args))
    assert side.returncode == 0, side.output
    lines = [ln for ln in side.output.splitlines() if LINE.match(ln)]
    assert len(lines) == 6, side.output
    return lines


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory):
    dst = tmp_path_factory.mktemp("o3_inference")
    shutil.copytree(os.path.join(ROOT, "legacy"), dst, dirs_exist_ok=True)
    res = subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(dst)], capture_output=True, text=True)
    assert res.returncode == 1, res.stdout + res.stderr
    text = (dst / "synth.py").read_text()
    imported = {n.module for n in ast.walk(ast.parse(text)) if isinstance(n, ast.ImportFrom)}
    assert "apex" not in imported and "amp.initialize(" not in text, text
    assert "net.half()" in text and "net.forward = half_forward(net.forward)" in text, text
    again = subprocess.run([sys.executable, "-m", "migrate", "rewrite", "--diff", str(dst)], capture_output=True,
                           text=True)
    assert again.stdout.count("+++") == 0, again.stdout
    return str(dst)


@pytest.mark.parametrize("args", [[], ["--is_fp16"]], ids=["fp32", "O3"])
def test_rewritten_equals_hand_migration_and_apex(rewritten, args):
    mine = _lines(rewritten, args)
    assert mine == _lines(os.path.join(ROOT, "migrated"), args)
    assert mine == _lines(os.path.join(ROOT, "legacy"), args)


def test_o3_runs_fp16_with_fp32_forward_outputs(rewritten):
    """The fp16 run is pure fp16 (`infer` returns fp16 audio) and the patched forward returns fp32, so the
    comparison above is not between two fp32 runs."""
    fp16 = _lines(rewritten, ["--is_fp16"])
    assert all("torch.float32 torch.float32" in ln for ln in fp16 if ln.startswith("score"))
    assert fp16 != _lines(rewritten, [])
