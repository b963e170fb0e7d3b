"""An fp32 `Engine` and an `ApexEngine(Engine)` with no other backend (tests/test_base_engine_step.py),
end to end: the CLI's rewrite of fixtures/runnable/base_engine_alone gives the apex engine an override
of the inherited `optimizer_step` with the scaler's step (A2A418) and keeps the scaler in its
checkpoint methods, while `Engine` stays as it was. The rewrite and the hand twin give identical
curves (losses, skipped steps, loss scale) for the fp32 engine and every opt level, uninterrupted and
through save + resume (each equal to the uninterrupted run); the legacy run (apex emulation) matches
them uninterrupted."""
import os
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from resume_curves import assert_curves_agree  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASE = os.path.join(REPO, "fixtures", "runnable", "base_engine_alone")
STEPS, SAVE_AT = 8, 3
MODES = [["--engine", "fp32"], ["--engine", "apex", "--opt-level", "O0"],
         ["--engine", "apex", "--opt-level", "O1"], ["--engine", "apex", "--opt-level", "O2"]]


@pytest.fixture(scope="module")
def sides(tmp_path_factory):
    dst = tmp_path_factory.mktemp("base_engine_alone")
    shutil.copytree(os.path.join(CASE, "legacy"), dst, dirs_exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(dst)], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 1 and "A2A418" in proc.stdout and "A2A126" not in proc.stdout, proc.stdout
    return {"legacy": os.path.join(CASE, "legacy"), "tool": str(dst), "hand": os.path.join(CASE, "migrated")}


def test_the_base_engine_is_left_as_it_was(sides):
    with open(os.path.join(sides["tool"], "train.py"), encoding="utf-8") as fh:
        text = fh.read()
    with open(os.path.join(CASE, "legacy", "train.py"), encoding="utf-8") as fh:
        legacy = fh.read()
    assert "from apex" not in text and "amp." not in text.replace("torch.amp.", "") and text.count("def optimizer_step") == 2
    assert text.split("class ApexEngine")[0].split('"""', 2)[2] == \
        legacy.split("class ApexEngine")[0].split('"""', 2)[2].replace("from apex import amp\n", "")
    assert 'state["amp"] = self.scaler.state_dict()' in text and 'self.scaler.load_state_dict(state["amp"])' in text


@pytest.mark.parametrize("mode", MODES, ids=lambda m: "-".join(x.lstrip("-") for x in m))
def test_rewrite_matches_the_twin_and_the_legacy_run(sides, mode, tmp_path):
    runs = assert_curves_agree(sides, mode, tmp_path, STEPS, SAVE_AT)
    if "O1" in mode:
        # the first step overflows at 2**16, so the resume must restore a scale that is not the initial one
        assert runs["hand"][0][1] and runs["hand"][SAVE_AT][2] < 65536.0
