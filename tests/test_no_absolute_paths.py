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


def test_a_finding_naming_an_importer_names_it_from_the_file_not_the_machine(tmp_path):
    """A2A310 keeps `BertLayerNorm` for a file that imports it from here: that file is named from the
    migrated file's folder (`modeling_gpt2.py`), not by the absolute path the cross-module walk found."""
    pkg = tmp_path / "repo" / "bert"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    shutil.copy(os.path.join(HERE, "..", "fixtures", "modules", "layer_norm_fallback_class.before.py"),
                pkg / "modeling.py")
    (pkg / "modeling_gpt2.py").write_text("from .modeling import BertLayerNorm\n\n\nNORM = BertLayerNorm\n")
    env = dict(os.environ, NO_COLOR="1", PYTHONPATH=os.path.dirname(HERE))
    out = subprocess.run([sys.executable, "-m", "apex2amp", "check", "--format", "json", "--no-cache", "repo"],
                         cwd=tmp_path, capture_output=True, text=True, env=env)
    assert "A2A310" in out.stdout
    assert str(tmp_path) not in out.stdout + out.stderr
    assert "kept for modeling_gpt2.py" in out.stdout
