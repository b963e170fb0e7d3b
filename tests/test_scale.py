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


def _write_marker(item):
    i, marker = item
    if i == 0:
        open(marker, "w").close()
    return -i


def test_pipeline_starts_follow_ups_while_first_stage_items_still_run(tmp_path):
    """The rewrite of a candidate found in the first screening chunk runs before the last chunk is
    screened: here the last item waits for a file only the first item's follow-up writes."""
    from migrate.pool import FilePool
    marker = str(tmp_path / "marker")
    items = [(i, marker, 5) for i in range(6)]
    with FilePool(2) as pool:
        results, followed = pool.pipeline(_wait_for_marker, items, lambda it: None,
                                          lambda res: [(res[0], (res[0], marker))] if res[0] in (0, 3) else [],
                                          _write_marker, lambda it: "crashed")
    assert results == [(0, None), (1, None), (2, None), (3, None), (4, None), (5, True)]
    assert followed == {0: 0, 3: -3}


def _follow_crashes_on_2(item):
    if item == 2:
        os._exit(3)
    return item * 10


def _check_crashing_pipeline(pool):
    """Item 7 kills its worker in the first stage, the follow-up of item 2 in the second: both are
    reported, every other result and follow-up comes back."""
    with pool:
        results, followed = pool.pipeline(_crash_on_7, list(range(10)), lambda i: ("crashed", i),
                                          lambda r: [(r, r // 2)] if isinstance(r, int) else [],
                                          _follow_crashes_on_2, lambda i: ("crashed", i))
    assert results == [0, 2, 4, 6, 8, 10, 12, ("crashed", 7), 16, 18]
    assert followed == {0: 0, 2: 10, 4: ("crashed", 2), 6: 30, 8: 40, 10: 50, 12: 60, 16: 80, 18: 90}


def test_pipeline_survives_a_worker_that_dies_in_a_follow_up():
    from migrate.pool import FilePool
    _check_crashing_pipeline(FilePool(2))


def test_pipeline_keeps_follow_ups_of_a_result_whose_submit_finds_the_pool_broken():
    """The pool can break between a first-stage result coming back and its follow-ups being
    submitted (the CI run that lost key 10 here): those follow-ups still run, after the restart."""
    from concurrent.futures.process import BrokenProcessPool

    from migrate.pool import FilePool

    class BreaksOnFollowUpOf5(FilePool):
        """The first executor refuses the follow-up of item 5 as a broken pool would."""

        def _start(self, n):
            executor = super()._start(n)
            if getattr(self, "_wrapped", False):
                return executor
            self._wrapped = True
            submit = executor.submit

            def breaking_submit(fn, item):
                if fn is _follow_crashes_on_2 and item == 5:
                    raise BrokenProcessPool("a worker died")
                return submit(fn, item)
            executor.submit = breaking_submit
            return executor

    _check_crashing_pipeline(BreaksOnFollowUpOf5(2))


def _double(i):
    return i * 2


def test_a_follow_up_that_kills_its_worker_after_every_first_stage_result_is_back_runs_out_of_process():
    """Nothing of the first stage is left to restart the pool with: the follow-ups still in doubt
    must go to fresh workers, never run in this process (where the crash would end the run)."""
    from migrate.pool import FilePool
    with FilePool(2) as pool:
        results, followed = pool.pipeline(_double, [1, 2, 3], lambda i: ("crashed", i),
                                          lambda r: [(r, r // 2)], _follow_crashes_on_2, lambda i: ("crashed", i))
    assert results == [2, 4, 6]
    assert followed == {2: 10, 4: ("crashed", 2), 6: 30}


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


def test_light_batches_keep_heavy_items_alone_and_light_ones_in_short_runs():
    from migrate.pool import BATCH_MAX, _light_batches
    order = list(range(100))
    weights = [5000.0] * 3 + [100.0] * 97
    units = _light_batches(order, weights, 4096, 2)
    assert units[:3] == [[0], [1], [2]]
    assert [i for u in units for i in u] == order  # every item once, in submission order
    assert all(len(u) <= BATCH_MAX and sum(weights[i] for i in u) < 4096 for u in units[3:])
    assert len(units) < 40
    assert _light_batches(order[:10], [1.0] * 10, 4096, 2) == [[i] for i in range(10)]  # too few to share


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


def test_screening_in_the_pool_agrees_with_screening_here(tmp_path, monkeypatch):
    import migrate.engine as engine
    from migrate.pool import FilePool
    treegen.generate(str(tmp_path / "t"), files=120, legacy_ratio=0.1, seed=5)
    (tmp_path / "t" / "binary.py").write_bytes(b"\x00\x01\x02 not python \xff")
    (tmp_path / "t" / "latin.py").write_bytes(b"# -*- coding: ascii -*-\nx = '\xe9'\n")
    monkeypatch.setattr(engine, "MIN_POOL_SCREEN", 8)
    monkeypatch.setattr(engine, "SCREEN_CHUNK", 16)
    mapped = []
    real_map = FilePool.map

    def spy(self, fn, items, *a, **k):
        mapped.append((fn.__name__, self.parallel_for(len(items)) or k.get("parallel")))
        return real_map(self, fn, items, *a, **k)

    monkeypatch.setattr(FilePool, "map", spy)
    real_pipeline = FilePool.pipeline

    def spy_pipeline(self, fn, items, *a, **k):
        mapped.append((fn.__name__, True))
        return real_pipeline(self, fn, items, *a, **k)

    monkeypatch.setattr(FilePool, "pipeline", spy_pipeline)
    summary = lambda r: [(f.path, f.new_text, f.error, [(x.code, x.line, x.message) for x in f.findings])
                         for f in r.files]
    here = summary(run([str(tmp_path / "t")], RunConfig(jobs=1)))
    assert ("_screen_task", True) not in mapped
    pooled = summary(run([str(tmp_path / "t")], RunConfig(jobs=2)))
    assert ("_screen_task", True) in mapped
    assert pooled == here
    assert sum(1 for _, _, error, _ in here if error) == 2
    cache = str(tmp_path / "cache")
    assert summary(run([str(tmp_path / "t")], RunConfig(jobs=2, cache_dir=cache))) == here
    assert summary(run([str(tmp_path / "t")], RunConfig(jobs=2, cache_dir=cache))) == here  # from the cache


def _mark_worker():
    """A pool initializer: leaves a per-process marker in the folder TEST_MARKERS names."""
    open(os.path.join(os.environ["TEST_MARKERS"], str(os.getpid())), "w").close()


def test_start_early_forks_every_worker_and_runs_its_initializer(tmp_path, monkeypatch):
    import time
    from migrate.pool import FilePool
    monkeypatch.setenv("TEST_MARKERS", str(tmp_path))
    with FilePool(2, initializer=_mark_worker) as pool:
        assert not pool.parallel_for(1)
        pool.start_early()
        deadline = time.monotonic() + 20
        while len(os.listdir(tmp_path)) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(os.listdir(tmp_path)) == 2  # both workers started, before any map
        assert pool.parallel_for(1)  # running workers take even a single item
        assert list(pool.map(_pid_of, ["x"], lambda t: None)) != [os.getpid()]
    with FilePool(1, initializer=_mark_worker) as pool:
        pool.start_early()  # one job: no workers
        assert not pool.parallel_for(1)


def test_a_big_cold_run_starts_its_workers_while_discovering(tmp_path, monkeypatch):
    import migrate.engine as engine
    from migrate.pool import FilePool
    started = []
    monkeypatch.setattr(FilePool, "start_early", lambda self: started.append(True))
    for i in range(engine.MIN_POOL_SCREEN):
        (tmp_path / f"m{i}.py").write_text("x = 1\n")
    engine.run([str(tmp_path)], RunConfig(jobs=2))
    assert started == [True]
    started.clear()
    (tmp_path / "m0.py").unlink()  # one file fewer than the pool screens: no early start
    engine.run([str(tmp_path)], RunConfig(jobs=2))
    assert started == []


def test_screening_chunks_start_small_and_cover_every_file():
    from migrate.engine import _ramped_chunks
    assert _ramped_chunks(317, 40) == [(0, 4), (4, 12), (12, 28), (28, 60), (60, 100), (100, 140), (140, 180),
                                       (180, 220), (220, 260), (260, 300), (300, 317)]
    for n, size in ((0, 5), (1, 1), (3, 40), (1000, 128), (17, 2)):
        chunks = _ramped_chunks(n, size)
        assert [i for a, b in chunks for i in range(a, b)] == list(range(n))
        assert all(0 < b - a <= size for a, b in chunks)


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
