"""A process pool that maps a function over files and hands results back in input order.

Small batches (pre-commit passes a handful of files per process) run in-process: starting workers
would cost more than the work. Workers are forked where the platform allows it, so they start with
libcst and the codemods already imported. A worker that dies (a crash in native code, the OOM
killer) does not hang or lose the run: results the other workers finished are kept and the pool is
restarted on the rest. When a fresh pool dies too, the rest run one at a time until the file that
kills its worker is found; that file is reported through `on_crash` (a death with several files in
flight cannot be pinned on one) and what follows goes back to the pool.
"""
from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, TypeVar

T = TypeVar("T")
R = TypeVar("R")

MIN_POOL_FILES = 16  # fewer candidate files than this are processed in-process...
MIN_POOL_BYTES = 64_000  # ...unless they weigh this much (two 32 KB rewrites outweigh starting workers)


def default_jobs() -> int:
    """Worker count when none is given: the cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _each(fn: Callable[[T], R], items: Sequence[T]) -> List[R]:
    """A worker's task for a batch of light items."""
    return [fn(item) for item in items]


BATCH_MAX = 8  # light items per task at most


def _light_batches(order: List[int], weights: List[float], under: float, jobs: int) -> List[List[int]]:
    """`order` (heaviest first) as tasks: each item of `under` bytes or more alone, the lighter ones
    in runs of up to BATCH_MAX that weigh under `under` together; the light ones are left alone when
    they are too few to keep every worker busy with several tasks."""
    light = sum(1 for w in weights if w < under)
    if light < 4 * jobs * 2:
        return [[i] for i in order]
    size = max(1, min(BATCH_MAX, light // (4 * jobs)))
    units: List[List[int]] = []
    run: List[int] = []
    total = 0.0
    for i, w in zip(order, weights):
        if w >= under:
            units.append([i])
            continue
        if run and (len(run) == size or total + w >= under):
            units.append(run)
            run, total = [], 0.0
        run.append(i)
        total += w
    if run:
        units.append(run)
    return units


def _context() -> Any:
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


class FilePool:
    """Ordered parallel map over files, created lazily and shared by the passes of one run."""

    def __init__(self, jobs: int, min_items: int = MIN_POOL_FILES, initializer: Optional[Callable[[], None]] = None):
        self.jobs = max(1, int(jobs or 1))
        self.min_items = min_items
        self.initializer = initializer  # run once in each worker as it starts (a module-level function)
        self._executor: Optional[ProcessPoolExecutor] = None
        self._crashed = False  # a worker died in this run: nothing may run in this process any more

    def __enter__(self) -> "FilePool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None

    def parallel_for(self, n: int, total_weight: float = 0.0) -> bool:
        """Whether `n` items (of `total_weight` bytes, when known) are worth sending to workers: any
        once the workers run (an earlier map started them), else enough items to pay for starting them."""
        return self.jobs > 1 and (n >= self.min_items or (self._executor is not None or self._crashed) and n >= 1
                                  or (n >= 2 and total_weight >= MIN_POOL_BYTES))

    def _start(self, n: int) -> ProcessPoolExecutor:
        if self._executor is None:
            self._executor = ProcessPoolExecutor(max_workers=min(self.jobs, max(1, n)), mp_context=_context(),
                                                 initializer=self.initializer)
        return self._executor

    def map(self, fn: Callable[[T], R], items: Sequence[T], on_crash: Callable[[T], R],
            weight: Optional[Callable[[T], float]] = None, parallel: Optional[bool] = None,
            batch_under: float = 0.0) -> Iterator[R]:
        """`fn(item)` for each item, yielded in input order as results become available.

        `fn` must be a module-level function (it is pickled by reference) and must not raise. With
        `weight`, the heaviest items are submitted first (a few large files then do not end the run
        on one busy worker while the others idle); results still come back in input order.
        `parallel` overrides `parallel_for` (for items that are batches of files). With `weight`,
        items lighter than `batch_under` go to workers a few at a time (`_light_batches`: each task
        costs a round trip, as much as a small file's rewrite); once a worker dies every item goes
        alone, so that the one that kills it can be found.
        """
        weights: Optional[List[float]] = None  # each item's, worked out once (a stat per file)
        if parallel is None:
            if weight is not None and len(items) < self.min_items:
                weights = [weight(item) for item in items]
            parallel = self.parallel_for(len(items), sum(weights) if weights else 0.0)
        if not parallel or self.jobs < 2:
            for item in items:
                yield fn(item)
            return
        if weight is not None and weights is None:
            weights = [weight(item) for item in items]
        done: Dict[int, Any] = {}
        todo = list(range(len(items)))
        out = 0
        breaks = 0  # pools that died in a row: the first may be chance (the OOM killer), not a file
        while todo:
            if breaks == 2:  # a fresh pool died too: find the item that brings it down
                done.update(self._isolate(fn, items, todo, on_crash))
                breaks = 0
            else:
                order = todo if weights is None else sorted(todo, key=lambda i: -weights[i])  # type: ignore[index]
                units = _light_batches(order, [weights[i] for i in order], batch_under, self.jobs) \
                    if weights is not None and batch_under and not self._crashed else [[i] for i in order]
                futures = self._submit(fn, items, units)
                broke = len(futures) < len(units)
                # in input order (a unit by its first item); the other workers' results outlive a death
                for key in sorted(futures, key=lambda k: min(units[k])):
                    try:
                        result = futures[key].result()
                    except BrokenProcessPool:
                        broke = True
                        continue
                    unit = units[key]
                    if len(unit) == 1:
                        done[unit[0]] = result
                    else:
                        done.update(zip(unit, result))
                    while out in done:
                        yield done.pop(out)
                        out += 1
                if broke:
                    self._discard()
                breaks = breaks + 1 if broke else 0
                todo = order  # submission order: the heavy first
            todo = [i for i in todo if i >= out and i not in done]
            while out in done:
                yield done.pop(out)
                out += 1

    def _submit(self, fn: Callable[[T], R], items: Sequence[T], units: List[List[int]]) -> Dict[int, Any]:
        """Futures keyed by position in `units` (lists of item positions; a unit of several is one task
        that returns their results in a list), submitted in `units`' order; those a worker's death
        stopped from being submitted are missing."""
        executor = self._start(len(units))
        futures: Dict[int, Any] = {}
        try:
            for k, unit in enumerate(units):
                futures[k] = executor.submit(fn, items[unit[0]]) if len(unit) == 1 else \
                    executor.submit(_each, fn, [items[i] for i in unit])
        except BrokenProcessPool:
            pass
        return futures

    def _isolate(self, fn: Callable[[T], R], items: Sequence[T], todo: List[int],
                 on_crash: Callable[[T], R]) -> Dict[int, R]:
        """Run `todo` one at a time on a worker of its own until one of them kills it: that one is
        reported through `on_crash` (with several in flight a death cannot be pinned on one). What
        follows it goes back to the pool."""
        finished: Dict[int, R] = {}
        executor = ProcessPoolExecutor(max_workers=1, mp_context=_context(), initializer=self.initializer)
        try:
            for i in todo:
                try:
                    finished[i] = executor.submit(fn, items[i]).result()
                except BrokenProcessPool:
                    finished[i] = on_crash(items[i])
                    break
        finally:
            executor.shutdown(wait=True, cancel_futures=True)
        return finished

    def _discard(self) -> None:
        """Drop a pool a worker's death broke; later work goes to fresh workers, never in-process
        (the file that killed the worker may be handed to a later pass)."""
        self._crashed = True
        if self._executor is not None:
            try:
                self._executor.shutdown(wait=False, cancel_futures=True)
            except Exception:  # pragma: no cover - a broken executor may complain
                pass
            self._executor = None

