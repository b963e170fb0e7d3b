"""verify: where the NaN came from (the probe's NaN locator), honest numbers with NaN/inf on one side, and the
statically known causes of a divergence (clip before unscale_, no update(), optimizer stepped directly)."""
import json
import os

import pytest

pytest.importorskip("torch")

from migrate.verify import run_side, verify  # noqa: E402
from migrate.verify import report  # noqa: E402
from migrate.verify.static_checks import likely_causes  # noqa: E402
from verify_cli import verify_cli  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNNABLE = os.path.join(ROOT, "fixtures", "runnable")
OVERFLOW = os.path.join(RUNNABLE, "overflow_layer")


def cli(*args):
    return verify_cli("--entry", "train.py", *args, cwd=ROOT)


def test_planted_overflow_is_named_on_both_sides(tmp_path):
    out = tmp_path / "v.json"
    r = cli("--steps", "3", "--json", str(out), os.path.join(OVERFLOW, "legacy"), os.path.join(OVERFLOW, "migrated"),
            "--", "--fp16")
    assert "first NaN/inf in the forward output of `boost` (Amplify)" in r.stdout, r.stdout + r.stderr
    data = json.loads(out.read_text())
    for side in ("original", "migrated"):
        (ev,) = data["nan_origin"][side]
        assert (ev["module"], ev["direction"], ev["rank"]) == ("boost", "forward output", 0)
        assert ev["step"] == 1 and ev["loss_scale"] == 32768.0  # traced lazily after the first skipped step
        assert ev["inputs"]["fits_fp16"] and not ev["outputs"]["fits_fp16"]
        assert ev["fp32_outputs"]["fits_bf16"] and not ev["fp32_outputs"]["fits_fp16"]
    assert "NaN/inf losses in both runs" in data["summary"]


def test_find_nan_traces_from_the_first_step():
    side = run_side(os.path.join(OVERFLOW, "migrated"), "train.py", ["--fp16"], steps=2, find_nan=True)
    (ev,) = [e for e in side.events if e.get("event") == "nonfinite"]
    assert (ev["module"], ev["step"], ev["loss_scale"], ev["trigger"]) == ("boost", 0, 65536.0, "--find-nan")


def test_find_nan_on_a_passing_run_says_nothing_was_found():
    r = cli("--steps", "2", "--find-nan", os.path.join(OVERFLOW, "legacy"), os.path.join(OVERFLOW, "migrated"),
            "--", "--fp16", "--gain", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "original run: no NaN/inf value seen in any module (traced every step, --find-nan)" in r.stdout
    assert "max relative loss difference 0" in r.stdout


def test_nan_on_one_side_is_a_divergence_and_its_messages_fold(tmp_path):
    out = tmp_path / "v.json"
    r = cli("--steps", "4", "--json", str(out), os.path.join(OVERFLOW, "legacy"), os.path.join(OVERFLOW, "fp32_boost"),
            "--", "--fp16")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "max relative loss difference inf; NaN/inf loss from step 0 in the original run only" in r.stdout
    data = json.loads(out.read_text())
    assert data["max_rel_diff"] == "inf" and data["first_nonfinite_step"] == {"original": 0, "migrated": None}
    assert data["reasons"] == ["rank 0 step 0: NaN/inf loss only in the original run",
                               "rank 0 steps 1-3: 3 more divergent step(s) after the first NaN/inf one at step 0 "
                               "(nonfinite)"]


@pytest.mark.parametrize("bug,cause", [
    ("clip_before_unscale", "clip_grad_norm_ clips the still scaled gradients: call scaler.unscale_(optimizer)"),
    ("no_update", "scaler.update() is never called"),
    ("no_scaler_step", "optimizer.step() is called directly while scaler scales the loss"),
])
def test_planted_bug_fails_naming_its_cause(bug, cause):
    verdict = verify(os.path.join(RUNNABLE, "single_accum", "legacy"),
                     os.path.join(RUNNABLE, "single_accum", "broken", bug), entry="train.py", steps=3,
                     device="cpu", args=["--fp16"], echo=lambda *a, **k: None)
    assert not verdict["passed"] and verdict["exit_code"] == 1
    assert verdict["reasons"][0].startswith("likely cause: train.py:") and cause in verdict["reasons"][0]


def test_correct_migrations_have_no_likely_cause():
    for case in sorted(os.listdir(RUNNABLE)):
        folder = os.path.join(RUNNABLE, case, "migrated")
        for name in os.listdir(folder) if os.path.isdir(folder) else []:
            assert likely_causes(os.path.join(folder, name)) == [], (case, name)


def test_plot_marks_nonfinite_and_skipped_steps(tmp_path):
    pytest.importorskip("matplotlib")
    nan = float("nan")
    rows = [{"rank": 0, "step": s, "original": [nan if s >= 2 else 1.0 / (s + 1)], "migrated": [1.0 / (s + 1)],
             "skipped": [s >= 2, s == 0], "scale": [2.0 ** (16 - s), 2.0 ** 16], "ok": s < 2} for s in range(4)]
    verdict = {"rows": rows, "passed": False, "first_divergent_step": 2}
    assert report.plot(verdict, str(tmp_path / "p.png")) is None
    assert (tmp_path / "p.png").stat().st_size > 1000


_BRANCHED_CLIP = '''import torch
model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
fp16 = True
scaler = torch.amp.GradScaler("cpu", enabled=fp16)
for step in range(3):
    loss = model(torch.randn(3, 4)).sum()
    scaler.scale(loss).backward()
    if fp16:
        {unscale}torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    else:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
'''


@pytest.mark.parametrize("unscale,reported", [("scaler.unscale_(optimizer)\n        ", False), ("", True)])
def test_a_clip_in_the_branch_beside_the_one_that_unscales_is_the_fp32_mode(tmp_path, unscale, reported):
    """`if fp16: scaler.unscale_(opt); clip else: clip` is the fp32 path of the same scaler (no cause);
    without the unscale_ in the fp16 branch, that branch's clip is still named."""
    script = tmp_path / "train.py"
    script.write_text(_BRANCHED_CLIP.format(unscale=unscale))
    causes = likely_causes(str(script))
    assert bool(causes) is reported
    if reported:
        assert causes[0].startswith("train.py:10:") or ":10:" in causes[0]
