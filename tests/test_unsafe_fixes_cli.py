"""Unsafe fixes through the real CLI: reported by default, applied with --unsafe-fixes or `unsafe-fixes = true`."""
from __future__ import annotations

import os
import shutil

from test_cli_helpers import cli

FIX = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "accum_clip")


def _repo(tmp_path, pyproject: str = "") -> str:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / ".git").mkdir()
    shutil.copy(os.path.join(FIX, "plain_accum_clip.before.py"), repo / "train.py")
    if pyproject:
        (repo / "pyproject.toml").write_text(pyproject)
    return str(repo)


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def test_default_applies_the_exact_fix_and_names_the_unsafe_one(tmp_path):
    repo = _repo(tmp_path)
    r = cli(["rewrite", "."], cwd=repo)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "A2A145" not in r.stdout
    line = next(ln for ln in r.stdout.splitlines() if "A2A148" in ln)
    assert line.startswith("train.py:11:") and "--unsafe-fixes" in line  # the rewritten file's line
    text = _read(os.path.join(repo, "train.py"))
    assert "clip_grad_norm_(model.parameters(), 1.0 * scaler.get_scale())" in text
    assert "unscale_" not in text


def test_flag_applies_the_move(tmp_path):
    repo = _repo(tmp_path)
    r = cli(["rewrite", "--unsafe-fixes", "."], cwd=repo)
    assert r.returncode == 1, r.stdout + r.stderr
    assert _read(os.path.join(repo, "train.py")) == _read(os.path.join(FIX, "plain_accum_clip.after.py"))
    line = next(ln for ln in r.stdout.splitlines() if "A2A145" in ln)
    assert "unsafe fix applied" in line
    again = cli(["rewrite", "--unsafe-fixes", "."], cwd=repo)
    assert "rewrote" not in again.stdout


def test_check_with_flag_writes_nothing(tmp_path):
    repo = _repo(tmp_path)
    before = _read(os.path.join(repo, "train.py"))
    r = cli(["check", "--unsafe-fixes", "--diff", "."], cwd=repo)
    assert r.returncode == 1
    assert "+            scaler.unscale_(optimizer)" in r.stdout
    assert _read(os.path.join(repo, "train.py")) == before


def test_config_key_applies_and_the_command_line_overrides(tmp_path):
    repo = _repo(tmp_path, "[tool.apex2amp]\nunsafe-fixes = true\n")
    before = _read(os.path.join(repo, "train.py"))
    r = cli(["rewrite", "--no-unsafe-fixes", "."], cwd=repo)
    assert "A2A148" in r.stdout and "get_scale()" in _read(os.path.join(repo, "train.py"))
    with open(os.path.join(repo, "train.py"), "w", encoding="utf-8") as fh:
        fh.write(before)
    cli(["rewrite", "."], cwd=repo)
    assert _read(os.path.join(repo, "train.py")) == _read(os.path.join(FIX, "plain_accum_clip.after.py"))


def test_config_key_must_be_a_bool(tmp_path):
    repo = _repo(tmp_path, '[tool.apex2amp]\nunsafe-fixes = "yes"\n')
    r = cli(["check", "."], cwd=repo)
    assert r.returncode == 2
    assert "unsafe-fixes must be true or false" in r.stderr


def test_explain_names_the_numerical_change(tmp_path):
    r = cli(["explain", "A2A145"], cwd=str(tmp_path))
    assert r.returncode == 0
    assert "--unsafe-fixes" in r.stdout and "whole" in r.stdout
