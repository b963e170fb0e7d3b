"""A clip in the same fp16 switch as each backward (`if fp16: scale_loss ...; clip(amp.master_params(opt))
else: backward; clip(model.parameters())`), on every micro-batch, with apex imported inside the switch and
the opt level from the command line (the shape of 2019 NER fine-tuning scripts). The exact fix
(A2A148) by default, the move offered (A2A145); with --unsafe-fixes the CLI's output equals the hand migration step by
step in fp32, O1 and O2, with the clip engaged, and `verify` compares the legacy program with it under the
fidelity tolerance."""
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
                    "ner_accum_clip")
MODES = {"fp32": [], "O1": ["--fp16", "--fp16_opt_level", "O1"], "O2": ["--fp16", "--fp16_opt_level", "O2"]}


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "migrate", *args], capture_output=True, text=True, cwd=cwd)


def _read(path):
    with open(path, encoding="utf-8") as fh:
        return fh.read()


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory):
    dst = str(tmp_path_factory.mktemp("ner_accum_clip") / "legacy")
    shutil.copytree(os.path.join(CASE, "legacy"), dst)
    before = _read(os.path.join(dst, "train.py"))
    offered = _cli("check", dst)  # the exact fix (A2A148) by default, the move offered
    assert "A2A148" in offered.stdout and "--unsafe-fixes` would instead move it" in offered.stdout, offered.stdout
    assert _read(os.path.join(dst, "train.py")) == before
    r = _cli("rewrite", "--unsafe-fixes", dst)
    assert r.returncode == 1 and "rewrote" in r.stdout, r.stdout + r.stderr
    assert "need review" in r.stdout and " 0 need review" in r.stdout, r.stdout
    text = _read(os.path.join(dst, "train.py"))
    assert "apex" not in text.split('"""', 2)[2] and "master_params" not in text
    assert text.count("clip_grad_norm_(") == 1 and text.count("scaler.unscale_(optimizer)") == 1
    assert text.index("scaler.unscale_(optimizer)") < text.index("clip_grad_norm_(") < text.index("scaler.step(")
    return dst


@pytest.mark.parametrize("mode", list(MODES))
def test_unsafe_fix_equals_hand_migration(rewritten, mode):
    tool = collect_losses(rewritten, "train.py", MODES[mode], steps=8, device="cpu")
    hand = collect_losses(os.path.join(CASE, "migrated"), "train.py", MODES[mode], steps=8, device="cpu")
    t = [(r["losses"], r["skipped"], r["scale"]) for r in tool[0]]
    h = [(r["losses"], r["skipped"], r["scale"]) for r in hand[0]]
    assert len(h) == 8 and t == h
    assert all(len(r["losses"]) == 2 for r in hand[0])  # two micro-batches per optimizer step


def test_the_clip_is_engaged_so_the_move_shows():
    """The fixture's max_norm is below the partial sums' norms: clipping each partial sum (legacy) and
    clipping the accumulated gradient once (the fix) give different curves, so the pair above tests the move."""
    legacy = collect_losses(os.path.join(CASE, "legacy"), "train.py", [], steps=8, device="cpu")
    hand = collect_losses(os.path.join(CASE, "migrated"), "train.py", [], steps=8, device="cpu")
    assert legacy[0][0]["losses"] == hand[0][0]["losses"]
    assert [r["losses"] for r in legacy[0]] != [r["losses"] for r in hand[0]]


def test_verify_uses_the_fidelity_tolerance(rewritten, tmp_path):
    out = tmp_path / "verdict.json"
    r = verify_cli(os.path.join(CASE, "legacy"), rewritten, "--entry", "train.py", "--steps", "8",
                   "--device", "cpu", "--json", str(out), "--", "--max_grad_norm", "0.5")  # engaged on few steps
    assert r.returncode == 0, r.stdout + r.stderr
    assert "unsafe fix" in r.stdout and "fidelity" in r.stdout
    verdict = json.loads(out.read_text())
    assert verdict["modes"]
    for m in verdict["modes"]:
        assert m["unsafe_fixes"] == ["train.py:67 A2A145"]
        assert m["passed"]
