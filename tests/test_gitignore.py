"""Discovery skips what git ignores: the walk's `.gitignore` rules against real `git` on the same tree."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from migrate import discovery

ROOT_RULES = """\
# build output
build/
/top_only.py
*_gen.py
!keep_gen.py
docs/**/auto_*.py
**/cache/
data?.py
sub/[ab]*.py
nested/deep
\\#literal.py
trailing_space.py   
"""

SUB_RULES = """\
!b_keep.py
local.py
"""

FILES = [
    "train.py", "top_only.py", "sub/top_only.py", "model_gen.py", "keep_gen.py", "sub/x_gen.py",
    "build/a.py", "sub/build/b.py", "docs/api/auto_x.py", "docs/auto_y.py", "docs/api/v1/auto_z.py",
    "docs/manual.py", "pkg/cache/c.py", "cache/d.py", "data1.py", "data12.py", "sub/a1.py", "sub/b_keep.py",
    "sub/c1.py", "sub/local.py", "local.py", "nested/deep/e.py", "nested/deeper/f.py", "#literal.py",
    "trailing_space.py", "sub/notes.md",
]


def _git(cwd, *args):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_discovery_skips_exactly_what_git_ignores(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / ".gitignore").write_text(ROOT_RULES)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / ".gitignore").write_text(SUB_RULES)
    for rel in FILES:
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("x = 1\n")
    ours = {os.path.relpath(d.path, tmp_path).replace(os.sep, "/") for d in discovery.discover([str(tmp_path)])}
    untracked = set(_git(tmp_path, "ls-files", "--others", "--exclude-standard").splitlines())
    gits = {p for p in untracked if discovery.file_kind(os.path.basename(p))}
    assert ours == gits
    assert "train.py" in ours and "keep_gen.py" in ours and "sub/b_keep.py" in ours  # the rules re-include
    assert not {"model_gen.py", "build/a.py", "docs/api/v1/auto_z.py", "data1.py", "sub/local.py"} & ours


def test_a_path_outside_the_rules_folder_is_not_judged(tmp_path):
    rules = discovery.GitIgnore(str(tmp_path / "sub"), ["*.py\n", "!keep.py\n"])
    assert rules.match(str(tmp_path / "sub" / "a.py"), False) is True
    assert rules.match(str(tmp_path / "sub" / "keep.py"), False) is False
    assert rules.match(str(tmp_path / "other" / "a.py"), False) is None
    assert rules.match(str(tmp_path / "sub" / "notes.md"), False) is None


def test_a_rule_python_cannot_compile_matches_nothing(tmp_path):
    rules = discovery.GitIgnore(str(tmp_path), ["[z-a]*\n", "build/\n", "*.log\n", "tmp[z-a]\n"])
    assert rules.match(str(tmp_path / "build"), True) is True
    assert rules.match(str(tmp_path / "zed.py"), False) is None
