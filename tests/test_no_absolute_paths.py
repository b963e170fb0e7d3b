"""No output format names the machine's absolute path, also inside a finding's message (a torchrun line)."""
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "..", "fixtures", "launch", "spawn_worker_init_in_helper_module.unchanged.py")


@pytest.mark.parametrize("args", [["check", "--format", "text"], ["check", "--format", "json"],
                                  ["check", "--format", "sarif"], ["check", "--format", "github"],
                                  ["rewrite", "--diff"]])
def test_finding_messages_name_the_file_relative_to_the_working_folder(tmp_path, args):
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy(FIXTURE, repo / "train.py")
    env = dict(os.environ, NO_COLOR="1", PYTHONPATH=os.path.dirname(HERE))
    out = subprocess.run([sys.executable, "-m", "apex2amp", *args, "--no-cache", "repo"], cwd=tmp_path,
                         capture_output=True, text=True, env=env)
    text = out.stdout + out.stderr
    assert "A2A413" in text or "spawn-init-in-other-module" in text
    assert str(tmp_path) not in text
    assert "repo/train.py" in text
