"""A clip in its own fp16 switch (`if fp16: clip(amp.master_params(opt)) else: clip(model.parameters())`)
after the backward's switch, on every micro-batch: the two clips collapse into one on the model's
parameters, moved to the accumulation boundary by the unsafe fix (A2A145). The CLI's rewrite with
--unsafe-fixes equals the hand migration step by step in fp32 and mixed precision, and `verify` compares
the legacy program with it under the fidelity tolerance."""
import json
import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from verify_cli import verify_cli  # noqa: E402

from migrate.verify import collect_losses  # noqa: E402

CASE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "runnable",
                    "accum_clip_branches")
MODES = [[], ["--fp16"]]


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "migrate", *args], capture_output=True, text=True, cwd=cwd)


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory):
    dst = str(tmp_path_factory.mktemp("accum_clip_branches") / "legacy")
    shutil.copytree(os.path.join(CASE, "legacy"), dst)
    offered = _cli("check", dst)  # the exact fix (A2A148) by default, the move offered
    assert "A2A148" in offered.stdout and "--unsafe-fixes` would instead move it" in offered.stdout, offered.stdout
    r = _cli("rewrite", "--unsafe-fixes", dst)
    assert r.returncode == 1 and "rewrote" in r.stdout, r.stdout + r.stderr
    with open(os.path.join(dst, "train.py"), encoding="utf-8") as fh:
        text = fh.read()
    assert "import apex" not in text.replace("from apex", "import apex") and "master_params" not in text
    assert text.count("clip_grad_norm_(model.parameters(), args.max_grad_norm)") == 1
    return dst


@pytest.mark.parametrize("mode", MODES, ids=["fp32", "fp16"])
@pytest.mark.parametrize("max_norm", ["0.3", "0.66"])  # the clip engaged on most steps / on a few
def test_unsafe_fix_equals_hand_migration(rewritten, mode, max_norm):
    args = mode + ["--max-grad-norm", max_norm]
    tool = collect_losses(rewritten, "train.py", args, steps=10, device="cpu")
    hand = collect_losses(os.path.join(CASE, "migrated"), "train.py", args, steps=10, device="cpu")
    t = [(r["losses"], r["skipped"], r["scale"]) for r in tool[0]]
    h = [(r["losses"], r["skipped"], r["scale"]) for r in hand[0]]
    assert len(h) == 10 and t == h


def test_verify_uses_the_fidelity_tolerance(rewritten, tmp_path):
    out = tmp_path / "verdict.json"
    r = verify_cli(os.path.join(CASE, "legacy"), rewritten, "--entry", "train.py", "--steps", "10",
                   "--device", "cpu", "--json", str(out), "--", "--max-grad-norm", "0.66")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "unsafe fix" in r.stdout and "fidelity" in r.stdout
    verdict = json.loads(out.read_text())
    for m in verdict["modes"]:
        assert m["unsafe_fixes"] == ["train.py:57 A2A145"]
        assert m["passed"]
