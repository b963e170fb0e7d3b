"""`--target fsdp2` on the command line and in `[tool.apex2amp]`: the torch floor, check/rewrite, explain."""
import os
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, "fixtures", "fsdp2", "ddp_layers_rank0_save.before.py")


def cli(args, cwd):
    return subprocess.run([sys.executable, "-m", "migrate", *args], capture_output=True, text=True, cwd=cwd,
                          env=dict(os.environ, PYTHONPATH=REPO, APEX2AMP_NO_CACHE="1"))


def _tree(tmp_path, pyproject=None):
    shutil.copy(SCRIPT, tmp_path / "train.py")
    if pyproject is not None:
        (tmp_path / "pyproject.toml").write_text(pyproject)
    return tmp_path


def test_min_torch_below_the_fully_shard_release_is_a_usage_error(tmp_path):
    _tree(tmp_path)
    r = cli(["rewrite", "--target", "fsdp2", "--min-torch", "2.5", "train.py"], tmp_path)
    assert r.returncode == 2 and "2.6" in r.stderr
    assert (tmp_path / "train.py").read_text() == open(SCRIPT).read()


def test_check_under_the_target_lists_the_sharding_and_writes_nothing(tmp_path):
    _tree(tmp_path)
    r = cli(["check", "--target", "fsdp2", "train.py"], tmp_path)  # no --min-torch: the target's floor
    assert r.returncode == 1, r.stdout + r.stderr
    assert "A2A801" in r.stdout and "A2A806" in r.stdout
    assert (tmp_path / "train.py").read_text() == open(SCRIPT).read()
    plain = cli(["check", "train.py"], tmp_path)
    assert "A2A80" not in plain.stdout  # the default target leaves DDP alone


def test_target_from_pyproject_and_the_command_line_overrides_it(tmp_path):
    _tree(tmp_path, '[tool.apex2amp]\ntarget = "fsdp2"\nmin-torch = "2.6"\n')
    r = cli(["rewrite", "train.py"], tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    text = (tmp_path / "train.py").read_text()
    assert "fully_shard(block, mp_policy=mp_policy)" in text and "DDP" not in text
    again = cli(["check", "train.py"], tmp_path)
    assert "0 to change" in again.stdout and "A2A80" not in again.stdout  # the rewrite is stable
    shutil.copy(SCRIPT, tmp_path / "train.py")
    assert "A2A80" not in cli(["check", "--target", "ddp", "train.py"], tmp_path).stdout


def test_bad_config_values_are_usage_errors(tmp_path):
    _tree(tmp_path, '[tool.apex2amp]\ntarget = "fsdp"\n')
    r = cli(["check", "train.py"], tmp_path)
    assert r.returncode == 2 and "target" in r.stderr
    (tmp_path / "pyproject.toml").write_text('[tool.apex2amp]\ntarget = "fsdp2"\nmin-torch = "2.4"\n')
    r = cli(["check", "train.py"], tmp_path)
    assert r.returncode == 2 and "2.6" in r.stderr


def test_explain_and_select_know_the_fsdp2_codes(tmp_path):
    r = cli(["explain", "A2A801", "A2A809"], tmp_path)
    assert r.returncode == 0 and "fully_shard" in r.stdout and "model.module" in r.stdout
    _tree(tmp_path)
    r = cli(["check", "--target", "fsdp2", "--select", "A2A8", "train.py"], tmp_path)
    assert "A2A801" in r.stdout and "A2A704" not in r.stdout
