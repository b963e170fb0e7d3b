"""A process pool that maps a function over files and hands results back in input order.

Small batches (pre-commit passes a handful of files per process) run in-process: starting workers
would cost more than the work. Workers are forked where the platform allows it, so they start with
libcst and the codemods already imported. A worker that dies (a crash in native code, the OOM
killer) does not hang or lose the run: the pool is restarted on the rest, and a file that brings a
fresh pool down again is reported through `on_crash` instead of retried forever.
"""
from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, TypeVar

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


def _nothing() -> None:
    """The task that starts an idle pool's workers."""


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
        once the workers run (an earlier map or `start_early` started them, and they are ready for
        the work, which this process may not be), else enough items to pay for starting them."""
        return self.jobs > 1 and (n >= self.min_items or self._executor is not None and n >= 1 or (
            n >= 2 and total_weight >= MIN_POOL_BYTES))

    def start_early(self) -> None:
        """Start the workers now, for a run that will use them: they fork and run `initializer` while
        this process goes on with what comes before the first map (all of them where workers fork;
        with the spawn start method the executor starts one per task, so here only the first)."""
        if self.jobs > 1 and self._executor is None:
            self._start(self.jobs).submit(_nothing)  # the first task makes the executor fork its workers

    def _start(self, n: int) -> ProcessPoolExecutor:
        if self._executor is None:
            self._executor = ProcessPoolExecutor(max_workers=min(self.jobs, max(1, n)), mp_context=_context(),
                                                 initializer=self.initializer)
        return self._executor

    def map(self, fn: Callable[[T], R], items: Sequence[T], on_crash: Callable[[T], R],
            weight: Optional[Callable[[T], float]] = None, parallel: Optional[bool] = None) -> Iterator[R]:
        """`fn(item)` for each item, yielded in input order as results become available.

        `fn` must be a module-level function (it is pickled by reference) and must not raise. With
        `weight`, the heaviest items are submitted first (a few large files then do not end the run
        on one busy worker while the others idle); results still come back in input order.
        `parallel` overrides `parallel_for` (for items that are batches of files).
        """
        if parallel is None:
            total = sum(weight(item) for item in items) if weight is not None and len(items) < self.min_items \
                else 0.0
            parallel = self.parallel_for(len(items), total)
        if not parallel or self.jobs < 2:
            for item in items:
                yield fn(item)
            return
        start = 0
        last_failed: Optional[int] = None
        while start < len(items):
            rest = items[start:]
            order = range(len(rest)) if weight is None else sorted(
                range(len(rest)), key=lambda i: -weight(rest[i]))  # type: ignore[misc]
            executor = self._start(len(rest))
            futures: list = [None] * len(rest)
            for i in order:
                futures[i] = executor.submit(fn, rest[i])
            broke_at: Optional[int] = None
            for k, fut in enumerate(futures):
                try:
                    value = fut.result()
                except BrokenProcessPool:
                    broke_at = start + k
                    break
                yield value
            if broke_at is None:
                return
            self._discard()
            if last_failed == broke_at:  # a fresh pool died on this very file again: it is the culprit
                yield on_crash(items[broke_at])
                start, last_failed = broke_at + 1, None
            else:
                start, last_failed = broke_at, broke_at

    def pipeline(self, fn: Callable[[T], R], items: Sequence[T], on_crash: Callable[[T], R],
                 follow: Callable[[R], Sequence[Tuple[Any, Any]]], follow_fn: Callable[[Any], Any],
                 follow_crash: Callable[[Any], Any], weight: Optional[Callable[[Any], float]] = None
                 ) -> Tuple[List[R], Dict[Any, Any]]:
        """`fn` over `items` in the workers (results in input order), and `follow_fn` over the
        (key, item) pairs `follow(result)` names, each submitted as soon as that result is back.

        At most two per worker of `items` run or wait at a time (one running, one queued, so no
        worker idles between them), so follow-up work queues behind no more than that: a big file
        found by the first screening chunk is rewritten while the others are still screened. Returns (results, {key: follow_fn(item)}). If a worker dies, what is left
        goes through `map` (which restarts the pool and isolates the item that brings it down).
        """
        executor = self._start(len(items))
        results: List[Any] = [None] * len(items)
        got = [False] * len(items)
        followed: Dict[Any, Any] = {}
        queued: Dict[Any, Tuple[Any, Any]] = {}  # key -> (item, future)
        waiting: Dict[Any, int] = {}  # future -> index into items
        nxt = 0
        try:
            while nxt < len(items) and len(waiting) < 2 * self.jobs:
                waiting[executor.submit(fn, items[nxt])] = nxt
                nxt += 1
            while waiting:
                done, _ = wait(list(waiting), return_when=FIRST_COMPLETED)
                for fut in done:
                    i = waiting.pop(fut)
                    results[i], got[i] = fut.result(), True
                    pairs = list(follow(results[i]))
                    if weight is not None:
                        pairs.sort(key=lambda kv: -weight(kv[1]))  # type: ignore[misc]
                    for key, item in pairs:  # named before any is submitted: a submit that finds the
                        queued[key] = (item, None)  # pool broken leaves the rest to the recovery below
                    for key, item in pairs:
                        queued[key] = (item, executor.submit(follow_fn, item))
                    if nxt < len(items):
                        waiting[executor.submit(fn, items[nxt])] = nxt
                        nxt += 1
            for key, (item, fut) in queued.items():
                followed[key] = fut.result()
            return results, followed
        except BrokenProcessPool:
            self._discard()
        rest = [i for i in range(len(items)) if not got[i]]
        for i, value in zip(rest, self.map(fn, [items[i] for i in rest], on_crash, parallel=True)):
            results[i] = value
            for key, item in follow(value):
                queued[key] = (item, None)
        lost = []
        for key, (item, fut) in queued.items():
            if key in followed:
                continue
            if fut is not None and fut.done() and not fut.cancelled() and fut.exception() is None:
                followed[key] = fut.result()
            else:
                lost.append((key, item))
        for (key, _), value in zip(lost, self.map(follow_fn, [item for _, item in lost], follow_crash,
                                                   weight=weight)):
            followed[key] = value
        return results, followed

    def _discard(self) -> None:
        if self._executor is not None:
            try:
                self._executor.shutdown(wait=False, cancel_futures=True)
            except Exception:  # pragma: no cover - a broken executor may complain
                pass
            self._executor = None

