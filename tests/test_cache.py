"""The result cache: a second run over unchanged files parses nothing and reports the same; any
change to a file, the facts it reads, the settings or apex2amp itself gets a fresh result."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import libcst as cst
import pytest

from migrate.engine import RunConfig, Selection, run

from test_pass_one import CALLER, HELPER  # one helper/caller pair for both suites

PLAIN = "import torch\n\n\ndef f(x):\n    return x.clamp(0, 1)\n"
HAZARD = "import torch\nscaler = torch.amp.GradScaler()\nmodel = model.half()\n"


def _tree(root):
    for name, text in (("helper.py", HELPER), ("caller.py", CALLER)):
        (root / name).write_text(textwrap.dedent(text).lstrip())
    (root / "plain.py").write_text(PLAIN)
    (root / "hazard.py").write_text(HAZARD)
    (root / "broken.py").write_text("def f(:\n    apex\n")
    (root / "binary.py").write_bytes(b"\x00\x01apex")


def _summary(res):
    return [(os.path.basename(f.path), f.changed, f.new_text if f.changed else "", f.error,
             [(x.code, x.line, x.col, x.message, x.fixed) for x in f.findings]) for f in res.files]


@pytest.fixture
def parses(monkeypatch):
    """The texts handed to libcst's public parser while the fixture is active (a spy on the library's
    entry point: apex2amp's own functions are not touched)."""
    seen = []
    real = cst.parse_module
    monkeypatch.setattr(cst, "parse_module", lambda text: seen.append(text) or real(text))
    return seen


def _bucket_state(cdir):
    return {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in cdir.glob("*.pickle")}


def test_second_run_parses_nothing_and_reports_the_same(tmp_path, parses):
    src, cdir = tmp_path / "src", tmp_path / "cache"
    src.mkdir()
    _tree(src)
    first = run([str(src)], RunConfig(jobs=1, cache_dir=str(cdir)))
    assert parses and first.errors and len(first.changed) == 2
    parses.clear()
    bucket = _bucket_state(cdir)
    second = run([str(src)], RunConfig(jobs=1, cache_dir=str(cdir)))
    assert parses == []
    assert _bucket_state(cdir) == bucket  # nothing new to remember: the bucket is not even rewritten
    assert _summary(second) == _summary(first)
    assert _summary(second) == _summary(run([str(src)], RunConfig(jobs=1)))  # and the same as without a cache
    assert (cdir / ".gitignore").read_text().strip().endswith("*")


def test_a_changed_file_is_parsed_again_and_only_it(tmp_path, parses):
    src, cdir = tmp_path / "src", tmp_path / "cache"
    src.mkdir()
    _tree(src)
    run([str(src)], RunConfig(jobs=1, cache_dir=str(cdir)))
    (src / "hazard.py").write_text(HAZARD + "images = images.half()\n")
    parses.clear()
    res = run([str(src)], RunConfig(jobs=1, cache_dir=str(cdir)))
    assert [p.count("\n") for p in parses] == [4]
    hazard = next(f for f in res.files if f.path.endswith("hazard.py"))
    assert [x.line for x in hazard.findings] == [3, 4]


def test_facts_that_change_reach_the_call_sites(tmp_path):
    src, cdir = tmp_path / "src", tmp_path / "cache"
    src.mkdir()
    _tree(src)
    res = run([str(src)], RunConfig(jobs=1, cache_dir=str(cdir)))
    caller = next(f for f in res.files if f.path.endswith("caller.py"))
    assert "train_one_epoch(model, loader, optimizer, scaler=scaler)" in caller.new_text
    # the helper no longer needs the scaler: the caller's cached rewrite must not be reused
    (src / "helper.py").write_text("def train_one_epoch(model, loader, optimizer):\n    pass\n")
    res = run([str(src)], RunConfig(jobs=1, cache_dir=str(cdir)))
    caller = next(f for f in res.files if f.path.endswith("caller.py"))
    # nothing takes the scaler any more: the initialize stays and says why (not the cached rewrite)
    assert not caller.changed and "scaler=scaler" not in caller.new_text
    assert any(f.code == "A2A124" for f in caller.findings)


def test_other_settings_use_other_results(tmp_path, parses):
    src, cdir = tmp_path / "src", tmp_path / "cache"
    src.mkdir()
    _tree(src)
    run([str(src)], RunConfig(jobs=1, cache_dir=str(cdir)))
    res = run([str(src)], RunConfig(jobs=1, cache_dir=str(cdir), select=Selection(ignore=["A2A604"])))
    hazard = next(f for f in res.files if f.path.endswith("hazard.py"))
    assert hazard.findings == []
    assert len(list(cdir.glob("*.pickle"))) == 2  # one bucket per settings


def test_another_apex2amp_uses_other_results(tmp_path):
    """A changed apex2amp (here: a copy of its sources with one codemod edited) does not read the
    results the installed one cached: it starts a bucket of its own, and both report the same."""
    src, cdir, tool = tmp_path / "src", tmp_path / "cache", tmp_path / "tool"
    src.mkdir()
    _tree(src)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for pkg in ("apex2amp", "migrate", "codemods"):
        shutil.copytree(os.path.join(root, pkg), tool / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    with open(tool / "codemods" / "hazards.py", "a", encoding="utf-8") as fh:
        fh.write("# an edit of apex2amp's sources\n")

    def check(pythonpath):
        env = {k: v for k, v in os.environ.items() if k not in ("APEX2AMP_CACHE_DIR", "APEX2AMP_NO_CACHE")}
        env["PYTHONPATH"] = str(pythonpath)
        return subprocess.run([sys.executable, "-m", "apex2amp", "check", "--format", "json", "--cache-dir",
                               str(cdir), str(src)], cwd=str(tmp_path), env=env, capture_output=True, text=True)
    first = check(root)
    assert len(list(cdir.glob("*.pickle"))) == 1
    edited = check(tool)
    assert len(list(cdir.glob("*.pickle"))) == 2  # a new bucket: nothing of the first one was used
    assert (edited.returncode, edited.stdout) == (first.returncode, first.stdout) and first.stdout


def test_a_damaged_cache_is_ignored_and_replaced(tmp_path):
    src, cdir = tmp_path / "src", tmp_path / "cache"
    src.mkdir()
    _tree(src)
    expected = _summary(run([str(src)], RunConfig(jobs=1, cache_dir=str(cdir))))
    (bucket,) = cdir.glob("*.pickle")
    bucket.write_bytes(b"not a pickle")
    assert _summary(run([str(src)], RunConfig(jobs=1, cache_dir=str(cdir)))) == expected
    assert _summary(run([str(src)], RunConfig(jobs=1, cache_dir=str(cdir)))) == expected
    assert bucket.read_bytes() != b"not a pickle"


def test_cached_rewrites_are_written_like_fresh_ones(tmp_path, parses):
    src, cdir = tmp_path / "src", tmp_path / "cache"
    src.mkdir()
    _tree(src)
    diff = run([str(src)], RunConfig(jobs=1, cache_dir=str(cdir)))  # rewrite --diff: fills the cache
    parses.clear()
    os.chmod(src / "caller.py", 0o444)
    try:
        res = run([str(src)], RunConfig(jobs=1, cache_dir=str(cdir), write=True))
    finally:
        os.chmod(src / "caller.py", 0o644)
    assert parses == []
    by_name = {os.path.basename(f.path): f for f in res.files}
    assert by_name["helper.py"].written
    assert (src / "helper.py").read_text() == next(f.new_text for f in diff.files if f.path.endswith("helper.py"))
    assert "read-only" in by_name["caller.py"].error and not by_name["caller.py"].written
    assert "apex" in (src / "caller.py").read_text()
    # the refusal was not cached: once writable, the cached rewrite is written (the helper is
    # restored first: once migrated it no longer tells pass 1 that it takes the scaler)
    (src / "helper.py").write_text(textwrap.dedent(HELPER).lstrip())
    res = run([str(src)], RunConfig(jobs=1, cache_dir=str(cdir), write=True))
    assert next(f for f in res.files if f.path.endswith("caller.py")).written


def test_cli_cache_folder_options(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    _tree(src)
    (tmp_path / "pyproject.toml").write_text("[tool.apex2amp]\nselect = []\n")
    env = {k: v for k, v in os.environ.items() if k not in ("APEX2AMP_CACHE_DIR", "APEX2AMP_NO_CACHE")}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")

    def check(*extra):
        return subprocess.run([sys.executable, "-m", "migrate", "check", "-q", *extra, str(src)],
                              cwd=str(tmp_path), env=env, capture_output=True, text=True)
    assert check("--no-cache").returncode == 2  # broken.py and binary.py
    assert not (tmp_path / ".apex2amp_cache").exists()
    first, again = check(), check()
    assert (tmp_path / ".apex2amp_cache" / ".gitignore").exists()  # beside pyproject.toml
    assert first.returncode == again.returncode == 2 and first.stdout == again.stdout and first.stderr == again.stderr
    elsewhere = tmp_path / "elsewhere"
    assert check("--cache-dir", str(elsewhere)).returncode == 2 and list(elsewhere.glob("*.pickle"))
