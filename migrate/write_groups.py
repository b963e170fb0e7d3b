"""Interrupt-safe writes: the files of a run that depend on each other are written as one group, and
Ctrl-C (SIGINT) or SIGTERM while writing lets the group being written finish and skips the rest, so a
cross-module migration (callers passing `scaler=` to a helper, checkpoint save/restore pairs, mixins)
is never left half written. The run ends with `Interrupted`, which lists what was written.

Test-only hook: `APEX2AMP_TEST_WRITE_PAUSE=SECONDS` sleeps after each file written, so that a test can
send a signal between two files of a group (tests/test_interrupt_safety.py). Nothing else reads it.
"""
from __future__ import annotations

import os
import signal
import time
from dataclasses import fields
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from codemods.base import RepoFacts

from . import discovery, prefilter

PAUSE_ENV = "APEX2AMP_TEST_WRITE_PAUSE"

Item = Tuple[int, Any, Any]  # (position in the run, discovery.Discovered, engine.FileResult)


class Interrupted(KeyboardInterrupt):
    """A signal arrived during the run: `written` files were written (whole groups), `skipped` were not."""

    def __init__(self, written: Sequence[str], skipped: Sequence[str], signum: int = signal.SIGINT):
        super().__init__(f"interrupted: {len(written)} file(s) written, {len(skipped)} left as they were")
        self.written, self.skipped, self.signum = list(written), list(skipped), signum


def _publishes(facts: Optional[RepoFacts]) -> bool:
    return facts is not None and any(bool(getattr(facts, f.name)) for f in fields(facts))


def group_writes(items: Sequence[Item], files: Sequence[Any], published: Dict[int, RepoFacts],
                 facts: RepoFacts) -> List[List[Item]]:
    """The changed files in groups that must be written together, in run order: one group of every
    file that publishes cross-module facts or may read them (it names a published function, or the
    module of a file that publishes facts; launch scripts and notebooks when a spawn was published),
    and each other file alone. Grouping too much is safe; too little is not."""
    if not _publishes(facts):
        return [[item] for item in items]
    modules = _modules_named(facts)
    for i, f in published.items():
        if _publishes(f) and files[i].kind == discovery.PYTHON:
            modules.add(discovery.module_name_for(files[i].path)[0].rpartition(".")[2].encode("utf-8"))
    modules.discard(b"")
    needles = set(prefilter.fact_needles(facts)) | modules  # an empty published name: in every file
    linked: List[Item] = []
    alone: List[List[Item]] = []
    for item in items:
        i, d, fr = item
        text = fr.old_text.encode("utf-8", "surrogatepass")
        if _publishes(published.get(i)) or any(n in text for n in needles) \
                or (d.kind != discovery.PYTHON and bool(facts.spawn_entries)):
            linked.append(item)
        else:
            alone.append([item])
    groups = alone + ([linked] if linked else [])
    return sorted(groups, key=lambda g: g[0][0])


def _modules_named(facts: RepoFacts) -> set:
    """The last components of the modules the merged facts are keyed by (`root::pkg.utils` -> `utils`):
    a file that imports one of them spells it."""
    out = set()
    for f in fields(facts):
        value = getattr(facts, f.name)
        keys = value.keys() if isinstance(value, dict) else value if isinstance(value, list) else ()
        for key in keys:
            if isinstance(key, str):
                out.add(key.rpartition("::")[2].rpartition(".")[2].encode("utf-8"))
    return out


def write_in_groups(groups: Sequence[Sequence[Item]], write: Callable[[Any, Any], Any]) -> None:
    """`write(d, fr)` for every item, group by group, with SIGINT and SIGTERM held until the group being
    written is done; after a signal, the other groups are skipped and `Interrupted` is raised."""
    seen: List[int] = []
    old = {}

    def hold(signum: int, _frame: Any) -> None:
        seen.append(signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            if signal.getsignal(sig) is not signal.SIG_IGN:  # a signal ignored (nohup, `cmd &`) stays so
                old[sig] = signal.signal(sig, hold)
        except (ValueError, OSError):  # not the main thread: writes cannot be interrupted by a signal here
            pass
    pause = float(os.environ.get(PAUSE_ENV, "0") or 0)
    written: List[str] = []
    skipped: List[str] = []
    try:
        for group in groups:
            if seen:
                skipped.extend(fr.path for _, _, fr in group)
                continue
            for _, d, fr in group:
                write(d, fr)
                if fr.written:
                    written.append(fr.path)
                if pause:
                    time.sleep(pause)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    if seen:
        raise Interrupted(written, skipped, seen[0])
