"""A2A607: fp16 casts in the files of a program the run migrates from apex amp that lie outside every
autocast region (apex O1's process-wide patching made them work). Whole projects under
fixtures/half_outside/ run through the CLI; see that folder's README.md."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "fixtures", "half_outside")


def _run(case, tmp_path, *flags):
    project = tmp_path / case
    shutil.copytree(os.path.join(FIXTURES, case), project)
    (project / ".git").mkdir()
    before = {p: (project / p).read_text() for p in _files(project)}
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run([sys.executable, "-m", "apex2amp", "rewrite", "--no-cache", "--format", "json", "--show-ignored", *flags, "."],
                         capture_output=True, text=True, cwd=project, env=env)
    assert res.returncode in (0, 1), res.stderr
    found = [(e["path"].replace(os.sep, "/"), f["line"], f["ignored"], f["message"])
             for e in json.loads(res.stdout)["files"] for f in e["findings"] if f["code"] == "A2A607"]
    changed = sorted(p for p, text in before.items() if (project / p).read_text() != text)
    return found, changed


def _files(project):
    return sorted(os.path.relpath(os.path.join(d, f), project).replace(os.sep, "/")
                  for d, _, fs in os.walk(project) for f in fs if f.endswith(".py"))


def test_casts_in_the_evaluation_module_of_a_migrated_program_are_reported(tmp_path):
    found, changed = _run("positive", tmp_path)
    assert changed == ["proj/trainer.py"]  # a finding only: the evaluation code stays byte-identical
    assert [(p, line, ignored) for p, line, ignored, _ in found] == [
        ("proj/evaluation.py", 11, False), ("proj/evaluation.py", 13, False), ("proj/evaluation.py", 14, True),
        ("proj/metrics.py", 5, False)]
    message = found[0][3]
    assert "`.half()`" in message and "trainer.py" in message
    assert 'torch.autocast("cuda", dtype=torch.float16, enabled=...)' in message and "drop the cast" in message
    assert "`.to(torch.float16)`" in found[1][3] and "`.type(torch.cuda.HalfTensor)`" in found[3][3]


def test_no_finding_off_the_migrated_program_or_on_deliberate_casts(tmp_path):
    found, changed = _run("negative", tmp_path)
    assert "proj/trainer.py" in changed and "infer.py" in changed  # the O3 script is the tool's to migrate
    assert found == []  # export.py never ran under the patching; the switch and round trip are on purpose


def test_no_finding_without_apex_amp(tmp_path):
    assert _run("no_amp", tmp_path) == ([], [])


def test_the_rule_can_be_deselected(tmp_path):
    found, _ = _run("positive", tmp_path, "--ignore", "A2A607")
    assert found == []
