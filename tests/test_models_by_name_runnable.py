"""A trainer holding its models by name (`MODEL_NAMES`, getattr / setattr), apex amp set up in an
`init_amp` method that `__init__` calls only when amp is on, an fp32 branch with its own backward, clip
and step loop beside the amp branch (accumulation, a per-optimizer clip loop, a step loop). The CLI keeps
the fp32 branch as it is, puts the scaler on the trainer (a disabled one before the gate, so the fp32 mode
finds one), autocasts the forward pass in the step method that calls the models by name, and equals the
hand migration step by step in fp32, O0 and O1, with the clip engaged and off."""
import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from migrate.verify import collect_losses  # noqa: E402
from resume_curves import assert_curves_agree  # noqa: E402

CASE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "runnable",
                    "models_by_name")
MODES = [["--amp", "-1"], ["--amp", "0"], ["--amp", "1"]]


def _read(path):
    with open(path, encoding="utf-8") as fh:
        return fh.read()


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory):
    dst = str(tmp_path_factory.mktemp("models_by_name") / "legacy")
    shutil.copytree(os.path.join(CASE, "legacy"), dst)
    r = subprocess.run([sys.executable, "-m", "migrate", "rewrite", dst], capture_output=True, text=True)
    assert "rewrote" in r.stdout and "A2A117" not in r.stdout and "A2A122" not in r.stdout, r.stdout + r.stderr
    text = _read(os.path.join(dst, "train.py"))
    assert "import apex" not in text and "apex.amp" not in text
    assert text.count(".update()") == 1 and text.count("optimizer.step()") == 1  # the fp32 branch's own
    return dst


@pytest.mark.parametrize("mode", MODES, ids=["fp32", "O0", "O1"])
@pytest.mark.parametrize("clip", ["0.2", "0"])
def test_rewrite_equals_hand_migration(rewritten, mode, clip):
    args = mode + ["--clip-grad-norm", clip]
    tool = collect_losses(rewritten, "train.py", args, steps=10, device="cpu")
    hand = collect_losses(os.path.join(CASE, "migrated"), "train.py", args, steps=10, device="cpu")
    t = [(r["losses"], r["skipped"], r["scale"]) for r in tool[0]]
    h = [(r["losses"], r["skipped"], r["scale"]) for r in hand[0]]
    assert len(h) >= 10 and t == h


@pytest.mark.parametrize("mode", MODES, ids=["fp32", "O0", "O1"])
def test_legacy_under_apex_matches_hand_migration(mode):
    args = mode + ["--clip-grad-norm", "0.2"]
    legacy = collect_losses(os.path.join(CASE, "legacy"), "train.py", args, steps=10, device="cpu")
    hand = collect_losses(os.path.join(CASE, "migrated"), "train.py", args, steps=10, device="cpu")
    lt = [r["losses"] for r in legacy[0]]
    ht = [r["losses"] for r in hand[0]]
    assert len(lt) == len(ht) >= 10
    for a, b in zip(lt, ht):
        assert a == pytest.approx(b, rel=2e-3, abs=1e-4)


@pytest.mark.parametrize("mode", MODES, ids=["fp32", "O0", "O1"])
def test_save_and_resume(rewritten, mode, tmp_path):
    """The checkpoint holds the models and optimizers by name (no amp state, as the legacy script saved
    none): the rewrite and the hand twin resume to the uninterrupted curve, equal to each other and to
    the legacy run under the apex emulation."""
    sides = {"legacy": os.path.join(CASE, "legacy"), "tool": rewritten, "hand": os.path.join(CASE, "migrated")}
    accumulate = ["--accumulate", "1"] if mode == ["--amp", "-1"] else []  # the fp32 branch steps every batch
    assert_curves_agree(sides, mode + accumulate + ["--clip-grad-norm", "0.2"], tmp_path, steps=8, save_at=4,
                        rel=2e-3)
