"""A clip on every micro-batch under gradient accumulation, migrated by default with A2A148: the clip stays in
place on the scaled gradients with its threshold times `scaler.get_scale()`, a used norm divided by it. End
to end through the CLI: equal to the hand migration step by step (losses, skipped steps, scales and the
logged norms) in fp32, O1 and O2; in O1 equal to apex (its CPU emulation) but for torch's 1e-6 in the clip
coefficient, for which `verify` applies the fidelity tolerance. A norm used on every micro-batch keeps the
clip there also with --unsafe-fixes. The legacy programs of the other accumulation-clip fixtures, rewritten
by default, track apex the same way."""
import json
import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from verify_cli import verify_cli  # noqa: E402

from migrate.verify import collect_losses  # noqa: E402

RUNNABLE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "runnable")
CASE = os.path.join(RUNNABLE, "accum_clip_exact")
MODES = {"fp32": [], "O1": ["--fp16"], "O2": ["--fp16", "--opt-level", "O2"]}
STEPS = 6


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "migrate", *args], capture_output=True, text=True)


def _read(path):
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def _rewrite(tmp_path_factory, case, *flags):
    dst = str(tmp_path_factory.mktemp(case) / "legacy")
    shutil.copytree(os.path.join(RUNNABLE, case, "legacy"), dst)
    r = _cli("rewrite", *flags, dst)
    assert r.returncode == 1 and "rewrote" in r.stdout and " 0 need review" in r.stdout, r.stdout + r.stderr
    return dst, r.stdout


def _run(folder, mode, tmp_path, name):
    """(per-step losses, skipped, scale) and the norms the program logged."""
    log = str(tmp_path / f"{name}.norms")
    recs = collect_losses(folder, "train.py", MODES[mode] + ["--norm-log", log], steps=STEPS, device="cpu")[0]
    with open(log, encoding="utf-8") as fh:
        norms = [float(line) for line in fh]
    return [(r["losses"], r["skipped"], r["scale"]) for r in recs], norms


@pytest.fixture(scope="module")
def exact(tmp_path_factory):
    dst, out = _rewrite(tmp_path_factory, "accum_clip_exact")
    assert "A2A148" in out and "A2A145" not in out, out
    text = _read(os.path.join(dst, "train.py"))
    assert "apex" not in text.split('"""', 2)[2] and "master_params" not in text and "unscale_" not in text
    assert "args.max_grad_norm * scaler.get_scale()) / scaler.get_scale()" in text
    return dst


@pytest.mark.parametrize("mode", list(MODES))
def test_exact_fix_equals_hand_migration(exact, mode, tmp_path):
    tool = _run(exact, mode, tmp_path, "tool")
    hand = _run(os.path.join(CASE, "migrated"), mode, tmp_path, "hand")
    assert len(tool[0]) == STEPS and len(tool[1]) >= (STEPS - 1) * 3
    assert tool == hand


def test_exact_fix_tracks_apex(exact, tmp_path):
    """O1 keeps fp32 weights, so the fix gives apex's losses and logged norms (the scaled norm divided by the
    scale again) to float rounding; the norms exceed the threshold, so the clip engaged on every micro-batch."""
    apex_side = _run(os.path.join(CASE, "legacy"), "O1", tmp_path, "apex")
    tool = _run(exact, "O1", tmp_path, "tool")
    a = [x for s in apex_side[0] for x in s[0]]
    b = [x for s in tool[0] for x in s[0]]
    assert len(a) == len(b) == STEPS * 3
    assert all(abs(x - y) <= 1e-5 * abs(x) for x, y in zip(a, b)), list(zip(a, b))
    assert len(tool[1]) == len(apex_side[1])
    assert all(abs(x - y) <= 1e-5 * abs(x) for x, y in zip(apex_side[1], tool[1]))
    assert min(apex_side[1]) > 0.2  # the default --max-grad-norm: every partial sum was clipped


def test_a_norm_used_on_every_micro_batch_keeps_the_clip_there_with_unsafe_fixes(exact, tmp_path_factory):
    moved, out = _rewrite(tmp_path_factory, "accum_clip_exact", "--unsafe-fixes")
    assert "A2A148" in out and "A2A145" not in out, out
    assert _read(os.path.join(moved, "train.py")) == _read(os.path.join(exact, "train.py"))


def test_verify_applies_the_fidelity_tolerance(exact, tmp_path):
    out = tmp_path / "verdict.json"
    r = verify_cli(os.path.join(CASE, "legacy"), exact, "--entry", "train.py", "--steps", str(STEPS),
                   "--device", "cpu", "--json", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "A2A148" in r.stdout and "fidelity" in r.stdout and "unsafe fix" not in r.stdout, r.stdout
    verdict = json.loads(out.read_text())
    assert verdict["modes"]
    for m in verdict["modes"]:
        assert m["unsafe_fixes"] == [] and m["passed"]
        assert m["scaled_clips"] == ["train.py:55 A2A148"]


OTHERS = [  # (fixture, entry, the mixed-precision mode's arguments): the clip engaged
    ("accum_clip", "train.py", ["--fp16", "--max-grad-norm", "0.3"]),
    ("accum_clip", "train_vit.py", ["--fp16", "--max-grad-norm", "0.3"]),
    ("accum_clip_branches", "train.py", ["--fp16", "--max-grad-norm", "0.3"]),
    ("accum_clip_guarded", "train.py", ["--fp16", "--max-grad-norm", "0.3"]),
    ("accum_clip_guarded", "train_single.py", ["--fp16", "--max-grad-norm", "0.3"]),
    ("ner_accum_clip", "train.py", ["--fp16", "--fp16_opt_level", "O1"]),
    ("summed_norm_accum_clip", "train.py", ["--fp16", "--fp16_opt_level", "O1"]),
]


@pytest.mark.parametrize("case,entry,args", OTHERS, ids=[f"{c}/{e}" for c, e, _ in OTHERS])
def test_default_rewrite_tracks_apex(case, entry, args, tmp_path_factory):
    dst, out = _rewrite(tmp_path_factory, case)
    assert "A2A148" in out, out
    legacy = collect_losses(os.path.join(RUNNABLE, case, "legacy"), entry, args, steps=8, device="cpu")[0]
    tool = collect_losses(dst, entry, args, steps=8, device="cpu")[0]
    a = [x for r in legacy for x in r["losses"]]
    b = [x for r in tool for x in r["losses"]]
    assert len(a) == len(b) >= 8
    # torch's 1e-6 in the clip coefficient, not the scale, sets this (5.6e-5 at worst after 10 steps)
    assert all(abs(x - y) <= 1e-4 * max(abs(x), 1e-6) for x, y in zip(a, b)), list(zip(a, b))
