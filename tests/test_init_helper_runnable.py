"""The shape of a setup helper in another module (issue 24 item 3): `prepare(model, optimizer, ..., fp16,
opt_level)` in setup_utils.py amp-initializes under the fp16 switch and returns model and optimizer; the
trainer class in train.py calls it in `__init__`, scales, clips (every micro-batch, apex's master params)
and steps at the accumulation boundary; the entry point is called by a decorator with the config alone.

The hand migration (the target of the planned cross-module rewrite: amp.initialize and the einsum
registration dropped from the helper, the GradScaler made in the trainer right after the helper's call with
enabled=fp16 and opt_level != "O0", autocast over forward and loss, one clip after `scaler.unscale_` at the
boundary) is compared step by step with the legacy program under the apex emulation."""
import os

import pytest

pytest.importorskip("torch")

from migrate.verify import collect_losses, compare  # noqa: E402

CASE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "runnable",
                    "init_helper")
MODES = {"fp32": [], "O1": ["--fp16", "--opt-level", "O1"], "O2": ["--fp16", "--opt-level", "O2"],
         "O0": ["--fp16", "--opt-level", "O0"]}


def _both(mode, max_norm, steps=6):
    args = MODES[mode] + ["--max-grad-norm", max_norm]
    legacy = collect_losses(os.path.join(CASE, "legacy"), "train.py", args, steps=steps, device="cpu")
    hand = collect_losses(os.path.join(CASE, "migrated"), "train.py", args, steps=steps, device="cpu")
    return legacy[0], hand[0]


@pytest.mark.parametrize("mode", ["fp32", "O1", "O0"])
@pytest.mark.parametrize("max_norm", ["0", "5.0"])  # clip off / on but never binding
def test_hand_migration_equals_apex_step_by_step(mode, max_norm):
    legacy, hand = _both(mode, max_norm)
    assert len(hand) == 6 and all(len(r["losses"]) == 3 for r in hand)  # three micro-batches per step
    assert [r["losses"] for r in legacy] == [r["losses"] for r in hand]
    assert not any(r["skipped"] for r in hand)
    assert all((r["scale"] is None) == (mode in ("fp32", "O0")) for r in hand)  # a scaler only when enabled


def test_o2_runs_under_autocast_with_a_scaler():
    """apex O2 (fp16 model, fp32 master weights) becomes autocast fp16 with fp32 weights: the first
    step's losses agree, later ones follow apex only within the mode change (A2A1xx opt-level note)."""
    legacy, hand = _both("O2", "0")
    assert legacy[0]["losses"] == hand[0]["losses"]
    assert all(r["scale"] == 65536.0 and not r["skipped"] for r in hand)


def test_binding_per_micro_batch_clip_is_the_a2a145_move():
    """With max_norm below the partial sums' norms apex clips each partial sum; the migration clips the
    accumulated gradient once (A2A145's unsafe fix): the first step's forward agrees, the curves then
    differ, within the fidelity tolerance's order but not equal."""
    legacy, hand = _both("O1", "0.3")
    assert legacy[0]["losses"] == hand[0]["losses"]
    assert [r["losses"] for r in legacy] != [r["losses"] for r in hand]
    verdict = compare({0: legacy}, {0: hand}, steps=6, mode="fidelity")
    assert verdict["max_rel_diff"] < 0.1


@pytest.mark.parametrize("unsafe,refusal", [([], "A2A117"), (["--unsafe-fixes"], "A2A126")],
                         ids=["default", "unsafe-fixes"])
def test_today_both_modules_are_left_whole(tmp_path, unsafe, refusal):
    """Until the cross-module rewrite exists the two modules migrate together or not at all: the helper's
    `amp.initialize` stays (A2A124), the trainer's module refuses (the per-micro-batch clip, A2A117 +
    A2A145, by default; A2A126 on the decorated entry point with --unsafe-fixes) and neither file changes."""
    import shutil
    import subprocess
    import sys
    dst = tmp_path / "legacy"
    shutil.copytree(os.path.join(CASE, "legacy"), dst)
    r = subprocess.run([sys.executable, "-m", "apex2amp", "rewrite", *unsafe, str(dst)], capture_output=True,
                       text=True)
    assert "A2A124" in r.stdout and refusal in r.stdout, r.stdout + r.stderr
    for name in ("setup_utils.py", "train.py"):
        with open(os.path.join(CASE, "legacy", name), encoding="utf-8") as a, open(dst / name, encoding="utf-8") as b:
            assert a.read() == b.read()


@pytest.mark.parametrize("mode", ["fp32", "O1"])
@pytest.mark.parametrize("max_norm", ["0.3", "0.05"])  # binding on most micro-batches
def test_per_micro_batch_clip_on_the_scaled_gradient_is_exact(mode, max_norm):
    """A possible safe form of A2A145's fix (a finding for its owner, not what the tool writes): keep the
    clip on every micro-batch, on the still-scaled gradient with `max_norm * scaler.get_scale()` (the norm
    scales with the gradient; 1.0 when the scaler is off): equal to apex step by step, clip binding."""
    args = MODES[mode] + ["--max-grad-norm", max_norm]
    legacy = collect_losses(os.path.join(CASE, "legacy"), "train.py", args, steps=6, device="cpu")[0]
    exact = collect_losses(os.path.join(CASE, "migrated_exact"), "train.py", args, steps=6, device="cpu")[0]
    assert len(exact) == 6 and [r["losses"] for r in legacy] == [r["losses"] for r in exact]
