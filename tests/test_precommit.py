"""The real `pre-commit` running this checkout's `.pre-commit-hooks.yaml` on a temporary repository.

The hook repository is a fresh git repository holding a copy of the working tree (pre-commit needs a
committed `rev`, and the checkout may have uncommitted changes). pre-commit builds the hook's virtualenv
with pip, which needs PyPI for libcst and click: the test is skipped when the index cannot be reached.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from test_cli_helpers import ECOSYSTEM, REPO

pytestmark = pytest.mark.slow

PACKAGE_PARTS = ("pyproject.toml", ".pre-commit-hooks.yaml", "README.md", "LICENSE", "migrate", "codemods",
                 "apex2amp")
OFFLINE_SIGNS = ("Failed to establish a new connection", "Could not find a version that satisfies",
                 "No matching distribution found", "Temporary failure in name resolution", "Network is unreachable")
GIT_ID = ["-c", "user.name=apex2amp tests", "-c", "user.email=tests@example.invalid", "-c", "commit.gpgsign=false"]


def git(args, cwd):
    return subprocess.run(["git", *GIT_ID, *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def make_hook_repo(dst: str) -> str:
    """Copy the package parts of the working tree into a new git repository; return its HEAD sha."""
    os.makedirs(dst)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for part in PACKAGE_PARTS:
        src = os.path.join(REPO, part)
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(dst, part), ignore=ignore)
        elif os.path.isfile(src):
            shutil.copy2(src, os.path.join(dst, part))
    if not os.path.exists(os.path.join(dst, "README.md")):
        with open(os.path.join(dst, "README.md"), "w") as fh:
            fh.write("apex2amp\n")
    git(["init", "-q"], dst)
    git(["add", "-A"], dst)
    git(["commit", "-q", "-m", "hooks under test"], dst)
    return git(["rev-parse", "HEAD"], dst).strip()


def pre_commit(args, cwd, env):
    return subprocess.run([sys.executable, "-m", "pre_commit", *args, "--color", "never"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)


def test_pre_commit_hooks_rewrite_then_pass(tmp_path):
    pytest.importorskip("pre_commit")
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    hooks = str(tmp_path / "hooks")
    rev = make_hook_repo(hooks)
    project = tmp_path / "project"
    project.mkdir()
    git(["init", "-q"], project)
    shutil.copy2(os.path.join(ECOSYSTEM, "precommit", "train_amp.py"), project / "train_amp.py")
    (project / "notes.txt").write_text("not python: the hooks must not look at it (apex amp)\n")
    (project / ".pre-commit-config.yaml").write_text(
        f"repos:\n- repo: {hooks}\n  rev: {rev}\n  hooks:\n  - id: apex2amp\n  - id: apex2amp-check\n")
    git(["add", "-A"], project)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PRE_COMMIT_HOME"] = str(tmp_path / "cache")
    original = (project / "train_amp.py").read_text()

    check = pre_commit(["run", "apex2amp-check", "--all-files"], project, env)
    out = check.stdout + check.stderr
    if any(s in out for s in OFFLINE_SIGNS):
        pytest.skip(f"pre-commit could not build the hook environment (offline?): {out[-400:]}")
    assert check.returncode == 1, out
    assert "would rewrite train_amp.py" in out
    assert (project / "train_amp.py").read_text() == original  # check writes nothing

    first = pre_commit(["run", "--all-files"], project, env)
    out = first.stdout + first.stderr
    assert first.returncode == 1, out
    assert "rewrote train_amp.py" in out
    migrated = (project / "train_amp.py").read_text()
    assert migrated != original and "amp.scale_loss" not in migrated
    assert (project / "notes.txt").read_text().startswith("not python")

    second = pre_commit(["run", "--all-files"], project, env)
    out = second.stdout + second.stderr
    assert second.returncode == 0, out
    assert (project / "train_amp.py").read_text() == migrated


HELPER = '''from apex import amp


def backward_step(loss, optimizer):
    with amp.scale_loss(loss, optimizer) as scaled_loss:
        scaled_loss.backward()
    optimizer.step()
'''

CALLER = '''import torch
from apex import amp

from helpers import backward_step


def main(data):
    model = torch.nn.Linear(4, 1).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    for x in data:
        loss = model(x).sum()
        backward_step(loss, optimizer)
'''


def test_helper_and_its_caller_migrate_together_however_many_files_are_staged(tmp_path):
    """pre-commit splits a hook's files over several processes unless the hook is serial; apex2amp's
    cross-file facts (a helper that now takes `scaler`, the caller that must pass it) need one process
    to see both. Eight files make pre-commit cut two batches, with the helper and its caller apart."""
    pytest.importorskip("pre_commit")
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    from pre_commit.lang_base import _shuffled
    from pre_commit.xargs import partition

    project = tmp_path / "project"
    project.mkdir()
    git(["init", "-q"], project)
    names = ["helpers.py", "train.py"] + [f"data_{i}.py" for i in range(6)]
    batches = partition(("apex2amp", "rewrite"), _shuffled(sorted(names)), 2)
    assert not any({"helpers.py", "train.py"} <= set(b) for b in batches)  # a parallel hook would split them
    (project / "helpers.py").write_text(HELPER)
    (project / "train.py").write_text(CALLER)
    for name in names[2:]:
        (project / name).write_text(f"ROWS = {len(name)}\n")
    hooks = str(tmp_path / "hooks")
    rev = make_hook_repo(hooks)
    (project / ".pre-commit-config.yaml").write_text(
        f"repos:\n- repo: {hooks}\n  rev: {rev}\n  hooks:\n  - id: apex2amp\n")
    git(["add", "-A"], project)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PRE_COMMIT_NO_CONCURRENCY")}
    env["PRE_COMMIT_HOME"] = str(tmp_path / "cache")

    first = pre_commit(["run", "--all-files"], project, env)
    out = first.stdout + first.stderr
    if any(s in out for s in OFFLINE_SIGNS):
        pytest.skip(f"pre-commit could not build the hook environment (offline?): {out[-400:]}")
    assert first.returncode == 1, out
    helper, caller = (project / "helpers.py").read_text(), (project / "train.py").read_text()
    assert "def backward_step(loss, optimizer, scaler):" in helper, out + helper
    assert "backward_step(loss, optimizer, scaler=scaler)" in caller, out + caller
    assert "apex" not in helper + caller, out
    assert "A2A124" not in out, out  # the caller's amp.initialize was not held back

    second = pre_commit(["run", "--all-files"], project, env)
    out = second.stdout + second.stderr
    assert "rewrote" not in out and "files were modified" not in out, out
    assert (project / "helpers.py").read_text() == helper and (project / "train.py").read_text() == caller
