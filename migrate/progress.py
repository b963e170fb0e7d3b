"""The progress bar of a long run on a terminal: one bar per stage (screening, pass 1, pass 2).

The engine names each stage with its number of items (`stage`) and advances it as items finish
(`tick`); the final results in path order (calling the object) advance pass 2. A stage's bar starts
at its own zero, so its time-left estimate is that of the work it counts, not of a run that seemed
stuck at 0 while another stage ran. Nothing is drawn when stderr is not a terminal, with --quiet, or
for runs of at most `MIN_FILES` files. Imports no libcst (it is made before a run starts).
"""
from __future__ import annotations

import sys
from typing import Any, Iterable, Iterator, Optional, TypeVar

MIN_FILES = 50
T = TypeVar("T")


def stderr_is_terminal(stream: Any = None) -> bool:
    stream = stream or sys.stderr
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class RunProgress:
    """Stage bars on stderr (a no-op object when not `enabled`)."""

    def __init__(self, enabled: bool, stream: Any = None):
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.files = 0
        self._bar: Any = None

    def stage(self, label: str, total: int, files: Optional[int] = None) -> None:
        """Start stage `label` of `total` items (`files`: the run's file count, which decides whether
        the run is long enough for a bar)."""
        if files is not None:
            self.files = files
        self.close()
        if not self.enabled or self.files <= MIN_FILES or total <= 0:
            return
        import click
        self._bar = click.progressbar(length=total, label=f"apex2amp {label}", file=self.stream, show_pos=True,
                                      show_eta=True)
        self._bar.__enter__()
        self._bar.render_progress()

    def tick(self, n: int = 1) -> None:
        if self._bar is not None and n:
            self._bar.update(n)

    def __call__(self, result: Any) -> None:
        """One final result (pass 2)."""
        self.tick(1)

    def close(self) -> None:
        if self._bar is not None:
            bar, self._bar = self._bar, None
            bar.__exit__(None, None, None)


def ticking(items: Iterable[T], progress: Any, weigh: Any = None) -> Iterator[T]:
    """`items`, advancing `progress` (when it has `tick`) by one, or by `weigh(item)`, per item."""
    tick = getattr(progress, "tick", None)
    for item in items:
        if tick is not None:
            tick(weigh(item) if weigh is not None else 1)
        yield item


def advance(progress: Any, n: int) -> None:
    """`progress.tick(n)` when `progress` draws stages."""
    tick = getattr(progress, "tick", None)
    if tick is not None and n > 0:
        tick(n)


def stage(progress: Any, label: str, total: int, files: Optional[int] = None) -> None:
    """`progress.stage(...)` when `progress` draws stages (a plain callback does not)."""
    fn = getattr(progress, "stage", None)
    if fn is not None:
        fn(label, total, files)
