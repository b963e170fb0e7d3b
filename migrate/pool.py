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
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, Iterator, Optional, Sequence, TypeVar

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


def _context() -> Any:
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


class FilePool:
    """Ordered parallel map over files, created lazily and shared by the passes of one run."""

    def __init__(self, jobs: int, min_items: int = MIN_POOL_FILES):
        self.jobs = max(1, int(jobs or 1))
        self.min_items = min_items
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
        """Whether `n` items (of `total_weight` bytes, when known) are worth sending to workers: any two
        once the workers run (an earlier map started them), else enough items to pay for starting them."""
        return self.jobs > 1 and (n >= self.min_items or (
            n >= 2 and (self._executor is not None or total_weight >= MIN_POOL_BYTES)))

    def _start(self, n: int) -> ProcessPoolExecutor:
        if self._executor is None:
            self._executor = ProcessPoolExecutor(max_workers=min(self.jobs, max(1, n)), mp_context=_context())
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

    def _discard(self) -> None:
        if self._executor is not None:
            try:
                self._executor.shutdown(wait=False, cancel_futures=True)
            except Exception:  # pragma: no cover - a broken executor may complain
                pass
            self._executor = None

