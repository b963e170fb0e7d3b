"""Ctrl-C and SIGTERM during `rewrite`/`check`: both stop the run the same way, exit 130, and say what
was written (migrate/write_groups.py writes whole groups of dependent files or none of them)."""
from __future__ import annotations

import signal
import sys
from contextlib import contextmanager
from typing import Any, Iterator

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells and ruff report an interrupted run


def _raise_interrupt(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt in this process while the block runs (as Ctrl-C does)."""
    try:
        old = signal.signal(signal.SIGTERM, _raise_interrupt)
    except (ValueError, OSError):  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def interrupted_exit(e: BaseException, writing: bool) -> int:
    """Tell what an interrupted run wrote (stderr) and return the exit status 130."""
    from .formats import display_path  # the paths as the text output writes them
    written = [display_path(p) for p in getattr(e, "written", ())]
    skipped = list(getattr(e, "skipped", ()))
    out = sys.stderr
    if not writing:
        print("interrupted: nothing was written", file=out)
    elif not written and not skipped:
        print("interrupted before any file was written: every file is as it was", file=out)
    else:
        for path in written:
            print(f"rewrote {path}", file=out)
        print(f"interrupted: {len(written)} file(s) written (files that depend on each other were written "
              f"together), {len(skipped)} left as they were; run `apex2amp rewrite` again to finish", file=out)
    out.flush()
    return EXIT_INTERRUPTED
