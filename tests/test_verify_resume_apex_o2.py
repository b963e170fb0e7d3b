"""verify --resume on an apex O2 script whose optimizer keeps per-parameter state (LAMB moments): apex builds
its fp32 master weights from the fp16 model on the first step after a load and loads the optimizer state
into the fp16 parameters' dtype, so the original's restart drifts from its own uninterrupted run while the
migrated program resumes exactly. verify passes such a pair and says why the sides are not compared."""
import json
import os
import shutil

import pytest

pytest.importorskip("torch")

from verify_cli import verify_cli  # noqa: E402

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEGACY = os.path.join(HERE, "fixtures", "runnable", "lamb", "legacy")


def test_o2_restart_drift_of_the_original_is_not_blamed_on_the_migration(tmp_path):
    src = tmp_path / "lamb"
    shutil.copytree(LEGACY, src)
    out = tmp_path / "v.json"
    res = verify_cli(str(src), "--entry", "train.py", "--steps", "6", "--device", "cpu", "--mode", "--opt-level O2",
                     "--resume", "--resume-at", "3", "--save-args", "--save-at {k} --ckpt {ckpt}", "--resume-args",
                     "--resume {ckpt}", "--json", str(out), cwd=str(tmp_path))
    verdict = json.loads(out.read_text())
    assert res.returncode == 0 and verdict["passed"], res.stdout + res.stderr
    resume = verdict["modes"][0]["resume"] if verdict.get("modes") else verdict["resume"]
    notes = " ".join(resume["notes"])
    assert "original's own restart does not reproduce" in notes and "resumes exactly" in notes, resume
