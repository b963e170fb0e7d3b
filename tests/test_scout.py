"""The scout (migrate/scout.py): a child forked before libcst is imported walks and screens the
tree; the run it feeds gives the same results as a run without it, whatever it managed to do."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from migrate import scout
from migrate.fileio import SourceError, read_bytes
from migrate.engine import RunConfig, run
from migrate.settings import Selection

import treegen

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the scout needs fork")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BAD = {
    "bad/undecodable.py": b"from apex import amp\nx = '\xff\xfe'\n",
    "bad/binary.py": b"\x7fELF\x02\x01\x01\x00\x00\x00apex",
    "bad/plain_binary.py": b"\x7fELF\x02\x01\x01\x00\x00\x00",
    "bad/badcookie.py": b"# -*- coding: no-such-codec -*-\nx = 1\n",
    "bad/syntax.py": b"from apex import amp\ndef f(:\n    pass\n",
    "launch/run.sh": b"python -m torch.distributed.launch --nproc_per_node=2 train.py\n",
    # only hazards' tokens: a file the scout must keep though it names no apex
    "hazard/half.py": b'import torch\n\n\ndef step(model, x):\n    with torch.autocast("cuda"):\n'
                      b'        return model(x.to(torch.float16))\n',
}


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("scouted")
    treegen.generate(str(root), files=300, legacy_ratio=0.05, seed=11)
    for name, data in BAD.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    os.symlink(root / "missing.py", root / "dangling.py")
    return str(root)


def _summary(result):
    return [(f.path, f.kind, f.new_text, f.error, [(x.code, x.line, x.new_line, x.message) for x in f.findings])
            for f in result.files]


SELECTIONS = [Selection(), Selection(select=["A2A1"]), Selection(select=["A2A4"]), Selection(select=["A2A6"]),
              Selection(select=["A2A5"]), Selection(ignore=["A2A6"]), Selection(select=["A2A125"])]


def test_the_scout_drops_only_files_the_engine_skips_under_every_selection(tree):
    """Exact under the full selection (the engine, which then takes the scout's verdicts, would keep
    the same files), and never a drop the engine would not make under a narrower one: every fixture
    (Python, launch scripts, notebooks) and the test tree's files."""
    from migrate import discovery, engine
    found = list(discovery.discover([os.path.join(ROOT, "fixtures"), tree]))
    assert {d.kind for d in found} > {discovery.PYTHON}
    for d in found:
        try:
            data = read_bytes(d.path)
        except SourceError:
            continue  # reported by the scout and the engine alike (see the tests below)
        verdict = scout.screen(d, data)[0]
        for sel in SELECTIONS:
            step = engine._screen_bytes(d, RunConfig(select=sel), data)[0]
            if verdict == "skip":
                assert step == engine._SKIP, (d.path, sel.select, sel.ignore)
        everything = engine._screen_bytes(d, RunConfig(), data)
        if verdict == "error":
            assert everything[1] is not None and everything[1].error, d.path
        else:
            assert (verdict == "keep") == (everything[0] != engine._SKIP), d.path


def test_the_command_line_needs_no_libcst():
    """The scout is forked before the libcst import (its screen, the codemods' TOKENS, imports
    libcst in the child), or it would have nothing to overlap."""
    code = ("import sys, migrate.cli, migrate.scout, migrate.settings, migrate.config, migrate.cache\n"
            "from migrate import discovery, prefilter\n"
            "assert 'libcst' not in sys.modules, sorted(m for m in sys.modules if 'libcst' in m)[:3]\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


class _Finished:
    """A scout the run waits for (a run collects at once, which may stop it before it starts)."""

    def __init__(self, started):
        self.started, self.found = started, None

    def collect(self, *args):
        self.found = self.started.collect(*args, stop=False)
        return self.found

    def close(self):
        self.started.close()


@pytest.mark.parametrize("cached", [False, True])
@pytest.mark.parametrize("finished", [False, True])
def test_a_run_fed_by_the_scout_gives_the_same_results(tree, tmp_path, cached, finished):
    alone = run([tree], RunConfig(jobs=2))
    config = RunConfig(jobs=2, cache_dir=str(tmp_path / "cache") if cached else None)
    started = scout.start([tree], config.excludes, config.jobs, cached)
    assert started is not None
    if finished:
        started = _Finished(started)
    scouted = run([tree], config, scout=started)
    if finished:
        assert started.found.reached == len(started.found.files) == len(alone.files)
    assert _summary(scouted) == _summary(alone)
    if cached:  # the scout's screens went into the cache: a warm run answers the same, with or
        # without a scout to hash the files for it
        warm = run([tree], RunConfig(jobs=2, cache_dir=str(tmp_path / "cache")))
        assert _summary(warm) == _summary(alone)
        again = _Finished(scout.start([tree], [], 2, True))
        warm = run([tree], RunConfig(jobs=2, cache_dir=str(tmp_path / "cache")), scout=again)
        assert again.found is not None and _summary(warm) == _summary(alone)


def test_a_re_run_fed_by_the_scout_sees_a_changed_file(tree, tmp_path):
    """The scout's digests name the bytes it read: a file edited since the last run misses the cache."""
    import shutil
    copy = str(tmp_path / "tree")
    shutil.copytree(tree, copy, symlinks=True)
    cache = str(tmp_path / "cache")
    run([copy], RunConfig(jobs=2, cache_dir=cache))
    target = os.path.join(copy, "hazard", "half.py")
    with open(target, "ab") as fh:
        fh.write(b"\n\ndef more(model, x):\n    with torch.autocast('cuda'):\n        return x.half()\n")
    fresh = run([copy], RunConfig(jobs=1))
    warm = run([copy], RunConfig(jobs=2, cache_dir=cache), scout=_Finished(scout.start([copy], [], 2, True)))
    assert _summary(warm) == _summary(fresh)


def test_what_the_scout_found(tree):
    started = scout.start([tree], [], 2, False)
    found = started.collect([tree], [], False, stop=False)
    from migrate.discovery import discover
    assert found is not None and [d.path for d in found.files] == [d.path for d in discover([tree])]
    names = {os.path.relpath(found.files[i].path, tree): message for i, message in found.errors.items()}
    assert {"bad/undecodable.py", "bad/binary.py", "bad/plain_binary.py", "bad/badcookie.py",
            "dangling.py"} <= set(names)
    wanted = {os.path.relpath(found.files[i].path, tree) for i in found.wanted}
    assert {"bad/syntax.py", "launch/run.sh", "hazard/half.py"} <= wanted  # apex, a file not Python, hazards
    assert found.kept == []  # a finished scout took a second look at every file with a token
    assert found.reached == len(found.files)
    # the bytes it read, in the memory it shares with this process: every Python file it could read
    readable = [i for i, d in enumerate(found.files) if d.kind == "python" and i not in found.errors]
    assert readable and all(found.data.get(i) == read_bytes(found.files[i].path) for i in readable)
    assert found.data.get(next(iter(found.errors))) is None


def test_a_scout_made_for_other_settings_is_not_used(tree):
    started = scout.start([tree], ["pkg1"], 2, False)
    assert started.collect([tree], [], False) is None
    started = scout.start([tree], [], 2, False)
    assert started.collect([tree], [], True) is None  # a cached run needs the digests


def test_a_scout_that_died_leaves_the_run_whole(tree):
    alone = run([tree], RunConfig(jobs=2))
    started = scout.start([tree], [], 2, False)
    os.kill(started._pid, 9)
    assert _summary(run([tree], RunConfig(jobs=2), scout=started)) == _summary(alone)


@pytest.mark.parametrize("second_looks", [False, True])
@pytest.mark.parametrize("reached", [0, 1, 37, 150])
def test_the_files_a_stopped_scout_did_not_reach_are_screened_by_the_run(tree, monkeypatch, reached, second_looks):
    """Told to stop (the run is ready before it is done), the scout answers for the first files only,
    and, when it had no time for their second looks, leaves the files with a token to the run."""
    alone = run([tree], RunConfig(jobs=2))
    started = scout.start([tree], [], 2, False)
    found = started.collect([tree], [], False, stop=False)

    class Partial:
        def collect(self, *args):
            part = scout.Scouted(found.files)
            part.errors = {i: m for i, m in found.errors.items() if i < reached}
            if second_looks:
                part.skipped = [i for i in found.skipped if i < reached]
                part.wanted = [i for i in found.wanted if i < reached]
            else:
                for i in range(reached):
                    if i not in part.errors:
                        verdict = scout.first_look(found.files[i], read_bytes(found.files[i].path))[0]
                        {"skip": part.skipped, "want": part.wanted, "keep": part.kept}[verdict].append(i)
                assert part.kept or reached < 37
            assert part.reached == reached
            return part

        def close(self):
            pass

    assert _summary(run([tree], RunConfig(jobs=2), scout=Partial())) == _summary(alone)


def test_a_scout_told_to_stop_at_once_still_answers_with_every_file(tree):
    started = scout.Scout([tree], [], False)  # collected at once: it may have screened nothing yet
    found = started.collect([tree], [], False)
    assert found is not None and len(found.files) == len(run([tree], RunConfig(jobs=1)).files)
    assert sorted(list(found.errors) + found.skipped + found.wanted + found.kept) == list(range(found.reached))


@pytest.mark.parametrize("selection", [Selection(select=["A2A6"]), Selection(ignore=["A2A4"])])
def test_a_run_under_a_narrower_selection_fed_by_the_scout_gives_the_same_results(tree, selection):
    """The scout screens under every rule; under a narrower selection the run screens its `wanted`
    files again."""
    alone = run([tree], RunConfig(jobs=2, select=selection))
    started = _Finished(scout.start([tree], [], 2, False))
    scouted = run([tree], RunConfig(jobs=2, select=selection), scout=started)
    assert started.found.wanted and _summary(scouted) == _summary(alone)


def test_no_scout_where_it_cannot_pay(tree):
    assert scout.start([tree], [], 1, False) is None  # one job: one process
    assert scout.start([tree], [], 2, False, prefilter=False) is None
    one = os.path.join(tree, "dangling.py")
    assert scout.start([one], [], 2, False) is None  # files named one by one (pre-commit)


def test_the_cli_run_with_a_scout_matches_one_job(tree):
    """Through the command line (where the scout starts) as in one process (where it does not)."""
    def cli(*args):
        return subprocess.run([sys.executable, "-m", "migrate", "check", "--no-cache", "--format", "json", *args,
                               tree], capture_output=True, text=True, cwd=ROOT)
    two, one = cli("-j", "2"), cli("-j", "1")
    assert two.returncode == one.returncode == 2
    assert two.stdout == one.stdout and two.stderr == one.stderr


def test_the_scout_works_out_module_names_from_the_tree_as_it_is_now(tmp_path):
    """A file inside an `apex` package is wanted whatever it holds (a vendored apex); the package
    facts an earlier run of this process learnt must not decide the scout's screen (the run itself
    forgets them)."""
    for i in range(3):
        (tmp_path / f"plain{i}.py").write_text("x = 1\n")
    (tmp_path / "apex").mkdir()
    (tmp_path / "apex" / "bad.py").write_text("scaler = loss_scale(\n")  # a token, and a syntax error
    run([str(tmp_path)], RunConfig(jobs=1))  # learns: apex/ is no package
    (tmp_path / "apex" / "__init__.py").write_text("")
    started = _Finished(scout.start([str(tmp_path)], [], 2, False))
    scouted = run([str(tmp_path)], RunConfig(jobs=2), scout=started)
    alone = run([str(tmp_path)], RunConfig(jobs=2))
    assert any(f.error for f in alone.files)
    assert _summary(scouted) == _summary(alone)
