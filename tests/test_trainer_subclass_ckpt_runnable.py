"""An apex trainer subclassing a generic fp32 trainer of another module (the shape of aps'
ApexTrainer, issue 24 item 2): amp.initialize in a setup method called from __init__, the amp state
restored there from the checkpoint the base loaded, saved through the model_states() the base's
save_checkpoint calls, the master gradients clipped. The CLI's rewrite of
fixtures/runnable/trainer_subclass_ckpt keeps the scaler on `self` and in both checkpoint methods and
leaves the base module as it is; it and the hand twin give identical curves (losses, skipped steps,
loss scale) for the base trainer alone and every opt level, uninterrupted and through save + resume
(each equal to the uninterrupted run); the legacy run (apex emulation) matches them uninterrupted."""
import os
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from resume_curves import assert_curves_agree  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASE = os.path.join(REPO, "fixtures", "runnable", "trainer_subclass_ckpt")
STEPS, SAVE_AT = 8, 3
MODES = [["--trainer", "fp32"], ["--trainer", "apex", "--opt-level", "O0"],
         ["--trainer", "apex", "--opt-level", "O1"], ["--trainer", "apex", "--opt-level", "O2"]]


@pytest.fixture(scope="module")
def sides(tmp_path_factory):
    dst = tmp_path_factory.mktemp("trainer_subclass_ckpt")
    shutil.copytree(os.path.join(CASE, "legacy"), dst, dirs_exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(dst)], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 1 and "A2A126" not in proc.stdout and "A2A117" not in proc.stdout, proc.stdout
    return {"legacy": os.path.join(CASE, "legacy"), "tool": str(dst), "hand": os.path.join(CASE, "migrated")}


def test_the_scaler_is_kept_on_the_trainer_and_in_its_checkpoint(sides):
    with open(os.path.join(sides["tool"], "train.py"), encoding="utf-8") as fh:
        text = fh.read()
    assert "from apex" not in text and "amp." not in text.split('"""', 2)[2].replace("torch.amp.", "")
    assert 'self.scaler.load_state_dict(self.cpt_stats["amp_state"])' in text
    assert '"amp_state": self.scaler.state_dict()' in text and "self.scaler.unscale_(self.optimizer)" in text
    for name in ("base_trainer.py",):
        with open(os.path.join(sides["tool"], name), encoding="utf-8") as fh, \
                open(os.path.join(CASE, "legacy", name), encoding="utf-8") as orig:
            assert fh.read() == orig.read()


@pytest.mark.parametrize("mode", MODES, ids=lambda m: "-".join(x.lstrip("-") for x in m))
def test_rewrite_matches_the_twin_and_the_legacy_run(sides, mode, tmp_path):
    runs = assert_curves_agree(sides, mode, tmp_path, STEPS, SAVE_AT)
    if "O1" in mode:
        # the first step overflows at 2**16, so the resume must restore a scale that is not the initial one
        assert runs["hand"][0][1] and runs["hand"][SAVE_AT][2] < 65536.0
