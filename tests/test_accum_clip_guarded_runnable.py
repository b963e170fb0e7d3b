"""A trainer class whose fp16 switch ends each branch in a clip under its own guard (`if max_grad_norm > 0:
clip(amp.master_params(opt))` / `... clip(model.parameters())`), on every micro-batch, the step at the
accumulation boundary: by default the exact fix (A2A148, tests/test_accum_clip_exact_runnable.py) with the
unsafe one offered (A2A145) and no second finding for the fp32 branch's clip; with --unsafe-fixes the two clips become one on the model's
parameters, with its guard, after `scaler.unscale_` at the boundary. The CLI's rewrite equals the hand
migration step by step in fp32 and fp16, with the clip engaged, rarely engaged, and switched off."""
import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from migrate.verify import collect_losses  # noqa: E402

CASE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "runnable",
                    "accum_clip_guarded")
MODES = [[], ["--fp16"]]


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "migrate", *args], capture_output=True, text=True, cwd=cwd)


def _read(path):
    with open(path, encoding="utf-8") as fh:
        return fh.read()


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory):
    dst = str(tmp_path_factory.mktemp("accum_clip_guarded") / "legacy")
    shutil.copytree(os.path.join(CASE, "legacy"), dst)
    offered = _cli("check", dst)  # the exact fix (A2A148) by default, the move offered
    assert "A2A148" in offered.stdout and "--unsafe-fixes` would instead move it" in offered.stdout, offered.stdout
    assert "A2A122" not in offered.stdout, offered.stdout
    r = _cli("rewrite", "--unsafe-fixes", dst)
    assert r.returncode == 1 and "rewrote" in r.stdout, r.stdout + r.stderr
    text = _read(os.path.join(dst, "train.py"))
    assert "import apex" not in text.replace("from apex", "import apex") and "amp.master_params" not in text
    assert text.count("clip_grad_norm_(") == 1 and text.count(".unscale_(") == 1
    assert text.count(".step(self.optimizer)") == 1 and text.count(".update()") == 1
    return dst


@pytest.mark.parametrize("mode", MODES, ids=["fp32", "fp16"])
@pytest.mark.parametrize("max_norm", ["0.3", "0.8", "0"])  # clip engaged on most steps / on a few / off
def test_unsafe_fix_equals_hand_migration(rewritten, mode, max_norm):
    args = mode + ["--max-grad-norm", max_norm]
    tool = collect_losses(rewritten, "train.py", args, steps=10, device="cpu")
    hand = collect_losses(os.path.join(CASE, "migrated"), "train.py", args, steps=10, device="cpu")
    t = [(r["losses"], r["skipped"], r["scale"]) for r in tool[0]]
    h = [(r["losses"], r["skipped"], r["scale"]) for r in hand[0]]
    assert len(h) == 10 and t == h


@pytest.mark.parametrize("mode", MODES, ids=["fp32", "fp16"])
@pytest.mark.parametrize("max_norm", ["0.3", "0"])
def test_single_guarded_clip_moves_with_its_guard(rewritten, mode, max_norm):
    """One clip under `if args.max_grad_norm > 0:` on apex's master params (no fp32 branch): the guard moves
    with it to the boundary, the clip on the optimizer's parameters."""
    text = _read(os.path.join(rewritten, "train_single.py"))
    assert "amp.master_params(" not in text and text.count("            if args.max_grad_norm > 0:\n") == 1
    args = mode + ["--max-grad-norm", max_norm]
    tool = collect_losses(rewritten, "train_single.py", args, steps=10, device="cpu")
    hand = collect_losses(os.path.join(CASE, "migrated"), "train_single.py", args, steps=10, device="cpu")
    t = [(r["losses"], r["skipped"], r["scale"]) for r in tool[0]]
    h = [(r["losses"], r["skipped"], r["scale"]) for r in hand[0]]
    assert len(h) == 10 and t == h
