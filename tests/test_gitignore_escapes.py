"""Discovery reads `.gitignore` escapes and `.git/info/exclude` as git does (real `git`, real CLI)."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from test_cli_helpers import cli

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

RULES = """\
\\!bang.py
\\*star.py
\\#hash.py
spaced.py\\ 
"""

FILES = ["!bang.py", "bang.py", "*star.py", "xstar.py", "#hash.py", "hash.py", "spaced.py ", "spaced.py",
         "local_only.py", "train.py"]


def _git(cwd, *args):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def test_escaped_rules_and_info_exclude_skip_what_git_skips(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / ".gitignore").write_text(RULES)
    (tmp_path / ".git" / "info").mkdir(exist_ok=True)
    (tmp_path / ".git" / "info" / "exclude").write_text("local_only.py\n")
    for rel in FILES:
        (tmp_path / rel).write_text("x = 1\n")
    gits = {p for p in _git(tmp_path, "ls-files", "--others", "--exclude-standard", "-z").split("\0")
            if p.endswith((".py", ".py "))}
    r = cli(["check", "-v", "--no-cache", "."], cwd=str(tmp_path))
    ours = {ln[len("unchanged "):] for ln in r.stdout.splitlines() if ln.startswith("unchanged ")}
    assert r.returncode == 0, r.stdout + r.stderr
    assert ours == {p for p in gits if p.endswith(".py")}, (ours, gits)
    assert {"bang.py", "xstar.py", "hash.py", "train.py"} <= ours
    assert not {"!bang.py", "*star.py", "#hash.py", "local_only.py"} & ours
    assert os.path.exists(tmp_path / "local_only.py")
