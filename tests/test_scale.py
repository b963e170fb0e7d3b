"""A large generated tree: rewrite it all (in a process pool), nothing crashes, every output parses,
a second run changes nothing; results come back in path order with the pool as without it."""
from __future__ import annotations

import ast
import os

import pytest

from migrate.engine import RunConfig, run

import treegen


@pytest.mark.slow
def test_generated_tree_rewrites_cleanly(tmp_path):
    paths = treegen.generate(str(tmp_path), files=400, legacy_ratio=0.06, seed=7)
    first = run([str(tmp_path)], RunConfig(write=True, jobs=2))
    internal = [f for f in first.files if f.error and "internal error" in f.error]
    assert not internal, [(f.path, f.error) for f in internal]
    from migrate.discovery import discover
    assert [f.path for f in first.files] == [d.path for d in discover([str(tmp_path)])]
    assert any(f.written for f in first.files)
    for p in paths:
        with open(p, "rb") as fh:
            ast.parse(fh.read())
    second = run([str(tmp_path)], RunConfig(write=False, jobs=2))
    assert not second.changed, [f.path for f in second.changed]


def test_pool_and_in_process_agree(tmp_path):
    treegen.generate(str(tmp_path), files=120, legacy_ratio=0.2, seed=3)
    seen = []
    one = run([str(tmp_path)], RunConfig(jobs=1))
    many = run([str(tmp_path)], RunConfig(jobs=2), on_result=lambda fr: seen.append(fr.path))
    assert seen == [f.path for f in one.files]
    summary = lambda r: [(f.path, f.new_text, f.error, [(x.code, x.line) for x in f.findings]) for f in r.files]
    assert summary(one) == summary(many)


def test_worker_crash_is_reported_not_hung(tmp_path):
    from migrate.pool import FilePool
    items = list(range(20))
    with FilePool(2, min_items=2) as pool:
        out = list(pool.map(_crash_on_7, items, lambda i: ("crashed", i)))
    assert out[7] == ("crashed", 7)
    assert [o for i, o in enumerate(out) if i != 7] == [i * 2 for i in items if i != 7]


def _wait_for_marker(item):
    """The last item waits (at most 20 s) for the marker the first item's follow-up (or the test) writes."""
    i, marker, last = item
    if i == last:
        import time
        deadline = time.monotonic() + 20
        while not os.path.exists(marker) and time.monotonic() < deadline:
            time.sleep(0.01)
        return i, os.path.exists(marker)
    return i, None


def _slow_unless_crashing_on_5(i):
    if i == 5:
        os._exit(3)
    import time
    time.sleep(0.3)
    return i


def test_a_crash_is_pinned_on_the_file_that_kills_the_worker_not_the_first_one_unfinished():
    """The heaviest file goes first and kills its worker at once while lighter files are still being
    worked on: the report names the heavy one, and every other file keeps its result."""
    from migrate.pool import FilePool
    with FilePool(2) as pool:
        out = list(pool.map(_slow_unless_crashing_on_5, list(range(6)), lambda i: ("crashed", i),
                            weight=lambda i: 100 if i == 5 else 1, parallel=True))
    assert out == [0, 1, 2, 3, 4, ("crashed", 5)]


def _pid(i):
    return os.getpid()


def test_after_a_worker_died_even_a_small_batch_runs_in_workers():
    """The file that killed a worker goes on to a later pass (a few files, normally run in-process):
    after a death nothing may run in this process, where a crash would end the run."""
    from migrate.pool import FilePool
    with FilePool(2) as pool:
        out = list(pool.map(_crash_on_7, list(range(8)), lambda i: ("crashed", i), parallel=True))
        assert out[7] == ("crashed", 7)
        assert os.getpid() not in pool.map(_pid, [7, 8], lambda i: None)


def test_light_items_go_to_workers_a_few_at_a_time_and_a_crash_among_them_is_still_pinned():
    """Small files share a task (a round trip costs about what a small file's rewrite does); a worker
    killed by one of them sends every item back alone, so the report names that one."""
    from migrate.pool import FilePool
    items = list(range(40))
    with FilePool(2) as pool:
        out = list(pool.map(_double_in_a_worker, items, lambda i: None, weight=lambda i: 1, batch_under=100))
    assert [o[0] for o in out] == [i * 2 for i in items]
    assert all(pid != os.getpid() for _, pid in out) and len({pid for _, pid in out}) <= 2
    with FilePool(2) as pool:
        out = list(pool.map(_crash_on_7, items, lambda i: ("crashed", i), weight=lambda i: 1, batch_under=100))
    assert out[7] == ("crashed", 7)
    assert [o for i, o in enumerate(out) if i != 7] == [i * 2 for i in items if i != 7]


def _double_in_a_worker(i):
    return i * 2, os.getpid()


def _crash_on_7(i):
    if i == 7:
        os._exit(3)
    return i * 2


def test_a_few_heavy_files_go_to_workers_and_light_ones_stay_in_process():
    from migrate.pool import MIN_POOL_BYTES, MIN_POOL_FILES, FilePool
    pool = FilePool(2)
    assert not pool.parallel_for(3, total_weight=MIN_POOL_BYTES / 10)
    assert pool.parallel_for(3, total_weight=MIN_POOL_BYTES)
    assert not pool.parallel_for(1, total_weight=10 * MIN_POOL_BYTES)  # one file cannot be split
    assert pool.parallel_for(MIN_POOL_FILES)
    assert not FilePool(1).parallel_for(MIN_POOL_FILES, total_weight=MIN_POOL_BYTES)
    heavy = [("a", MIN_POOL_BYTES), ("b", MIN_POOL_BYTES)]
    with FilePool(2) as p:
        out = list(p.map(_pid_of, heavy, lambda t: None, weight=lambda t: t[1]))
    assert all(pid != os.getpid() for pid in out)  # ran in workers, results in input order
    with FilePool(2) as p:
        out = list(p.map(_pid_of, [("a", 10), ("b", 10)], lambda t: None, weight=lambda t: t[1]))
    assert out == [os.getpid(), os.getpid()]


def _pid_of(item):
    return os.getpid()


def test_screening_in_the_pool_agrees_with_screening_here(tmp_path):
    """Enough files that `jobs=2` screens them in the pool (bytes that are no Python, a wrong coding
    cookie among them): every result, error and finding is the one of the in-process run, with or
    without the cache, and again when the cache answers."""
    treegen.generate(str(tmp_path / "t"), files=300, legacy_ratio=0.03, seed=5)
    (tmp_path / "t" / "binary.py").write_bytes(b"\x00\x01\x02 not python \xff")
    (tmp_path / "t" / "latin.py").write_bytes(b"# -*- coding: ascii -*-\nx = '\xe9'\n")
    summary = lambda r: [(f.path, f.new_text, f.error, [(x.code, x.line, x.message) for x in f.findings])
                         for f in r.files]
    here = summary(run([str(tmp_path / "t")], RunConfig(jobs=1)))
    assert len(here) > 300 and any(f[3] for f in here)
    assert summary(run([str(tmp_path / "t")], RunConfig(jobs=2))) == here
    assert sum(1 for _, _, error, _ in here if error) == 2
    cache = str(tmp_path / "cache")
    assert summary(run([str(tmp_path / "t")], RunConfig(jobs=2, cache_dir=cache))) == here
    assert summary(run([str(tmp_path / "t")], RunConfig(jobs=2, cache_dir=cache))) == here  # from the cache


def test_weighted_results_stream_in_input_order_while_the_heavy_item_runs(tmp_path):
    """The heaviest item goes first, but the others' results are handed on as they come (to a
    progress bar, to the cache), not after it."""
    from migrate.pool import FilePool
    marker = tmp_path / "first-result"
    items = [(i, str(marker), 19) for i in range(20)]  # the heaviest waits for the first result
    with FilePool(2) as pool:
        stream = pool.map(_wait_for_marker, items, lambda t: None, weight=lambda t: 100 if t[0] == 19 else 1,
                          parallel=True)
        assert next(stream) == (0, None)
        marker.write_text("")
        rest = list(stream)
    assert rest[-1] == (19, True) and [r[0] for r in rest] == list(range(1, 20))
