"""Real `pre-commit`, run twice on a temporary repository: the hooks receive shell launch scripts, and
the follow-up a rewrite leaves (old apex checkpoints to convert, A2A107) keeps the second run red until
it is done. Skipped when pre-commit cannot build the hook's environment (no PyPI)."""
from __future__ import annotations

import os
import shutil

import pytest

from test_cli_helpers import REPO
from test_precommit import OFFLINE_SIGNS, git, make_hook_repo, pre_commit

pytestmark = pytest.mark.slow


def test_second_run_still_reports_the_checkpoint_follow_up_and_scripts_are_hooked(tmp_path):
    pytest.importorskip("pre_commit")
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    rev = make_hook_repo(str(tmp_path / "hooks"))
    project = tmp_path / "project"
    shutil.copytree(os.path.join(REPO, "fixtures", "demo"), project)
    (project / "run_train").write_text("#!/usr/bin/env bash\n"
                                       "python -m torch.distributed.launch --nproc_per_node=2 train.py --fp16\n")
    os.chmod(project / "run_train", 0o755)
    git(["init", "-q"], project)
    (project / ".pre-commit-config.yaml").write_text(
        f"repos:\n- repo: {tmp_path / 'hooks'}\n  rev: {rev}\n  hooks:\n  - id: apex2amp\n  - id: apex2amp-check\n")
    git(["add", "-A"], project)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PRE_COMMIT_HOME"] = str(tmp_path / "cache")

    first = pre_commit(["run", "--all-files"], project, env)
    out = first.stdout + first.stderr
    if any(s in out for s in OFFLINE_SIGNS):
        pytest.skip(f"pre-commit could not build the hook environment (offline?): {out[-400:]}")
    assert first.returncode == 1, out
    assert "torchrun --nproc_per_node=2 train.py" in (project / "run_train").read_text()
    assert "torchrun" in (project / "launch.sh").read_text()
    git(["add", "-A"], project)

    second = pre_commit(["run", "--all-files"], project, env)
    out = second.stdout + second.stderr
    assert second.returncode == 1, out
    assert "checkpoint.py:" in out and "A2A107" in out and "0 fixable, 1 need review" in out

    path = project / "checkpoint.py"
    path.write_text(path.read_text().replace('scaler.load_state_dict(checkpoint["amp"])',
                                             'scaler.load_state_dict(checkpoint["amp"])  # apex2amp: ignore[A2A107]'))
    git(["add", "-A"], project)
    third = pre_commit(["run", "--all-files"], project, env)
    assert third.returncode == 0, third.stdout + third.stderr
