"""Which of many names occur in a file's bytes, at about the cost of one read of the file.

`NameSearch(names).present(data)` is `{n for n in names if n in data}` (plain substring search),
worked out without one search per name: a name made of identifier bytes occurs in the bytes exactly
when it occurs inside one of their runs of identifier bytes, so each file is split once into those
runs, and which names a run holds is worked out once per distinct run (identifiers repeat across
files). Names with other bytes (dots, the empty name) are searched for one by one.
"""
from __future__ import annotations

import re
from typing import Dict, FrozenSet, Iterable, Set, Tuple

_RUN = re.compile(rb"[A-Za-z0-9_\x80-\xff]+")
_WORD = re.compile(rb"[A-Za-z0-9_\x80-\xff]+\Z")
_CACHED_RUN = 64  # longer runs (blobs) are searched name by name, and not kept
_FEW = 8  # this many names or fewer are searched for one by one


class NameSearch:
    """A fixed set of byte names, searched for in many files."""

    def __init__(self, names: Iterable[bytes]):
        names = set(names)
        self._words: Set[bytes] = {n for n in names if _WORD.match(n)}
        self._others: Tuple[bytes, ...] = tuple(n for n in names if n not in self._words)
        self._lengths: Tuple[int, ...] = tuple(sorted({len(n) for n in self._words}))
        self._runs: Dict[bytes, FrozenSet[bytes]] = {}
        self._empty: Set[bytes] = set()  # runs known to hold no name (most of them): set off in one step

    def _in_run(self, run: bytes) -> FrozenSet[bytes]:
        hit = self._runs.get(run)
        if hit is not None:
            return hit
        words, size = self._words, len(run)
        if size > _CACHED_RUN:  # a blob: one search per name beats every slice of it
            return frozenset(n for n in words if n in run)
        found = frozenset(run[i:i + n] for n in self._lengths if n <= size
                          for i in range(size - n + 1) if run[i:i + n] in words)
        if found:
            self._runs[run] = found
        else:
            self._empty.add(run)
        return found

    def present(self, data: bytes) -> Set[bytes]:
        """The names that occur in `data` (as `name in data` says)."""
        out: Set[bytes] = {n for n in self._others if n in data}
        if len(self._words) <= _FEW:  # a few searches of the bytes beat splitting them into runs
            out.update(n for n in self._words if n in data)
        elif self._words:
            for run in set(_RUN.findall(data)) - self._empty:
                out.update(self._in_run(run))
        return out
