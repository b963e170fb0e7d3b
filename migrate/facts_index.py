"""An index of the facts pass 1 published, so that asking whether a file may use one costs about a
read of the file, however many files published facts.

`FactsIndex(facts).mentions(data, module_name, skip_keys)` answers exactly what
`prefilter.mentions_fact(data, facts, module_name, skip_keys)` answers. The plain check searches the
file once per publishing module (its last name) and once per published function, so a run whose
tree has 20x the apex files paid 20x per file, 400x in all. Here every name a check may search for is
a needle; each file is split once into its runs of identifier bytes, and a needle made of identifier
bytes occurs in the file exactly when it occurs inside one of those runs. Which needles a run holds is
worked out once per distinct run (identifiers repeat across files), and the keys are looked up from
the needles found, not tried one by one.
"""
from __future__ import annotations

import re
from typing import Dict, FrozenSet, List, Optional, Sequence, Set, Tuple

from codemods.records import RepoFacts

_RUN = re.compile(rb"[A-Za-z0-9_\x80-\xff]+")
_WORD = re.compile(rb"[A-Za-z0-9_\x80-\xff]+\Z")
_CACHED_RUN = 64  # longer runs (blobs) are searched needle by needle, and not kept


def _last(module: str) -> bytes:
    return module.rpartition(".")[2].encode()


class FactsIndex:
    """The facts of one run (fixed once built), indexed by the names their checks search for."""

    def __init__(self, facts: Optional[RepoFacts]):
        self.facts = facts
        # per kind: key -> (module, its last name, the names a call spells)
        self._entries: List[Dict[str, Tuple[str, bytes, Tuple[bytes, ...]]]] = [{}, {}]
        self._by_last: List[Dict[bytes, List[str]]] = [{}, {}]
        self._by_module: List[Dict[str, List[str]]] = [{}, {}]
        self._unmigrated_lasts: Dict[bytes, List[str]] = {}
        self._spawn: Set[bytes] = set()
        needles: Set[bytes] = set()
        if facts:
            kinds = ((facts.scaler_functions, lambda funcs: [f.encode() for f in funcs]),
                     (facts.scaler_required, lambda req: [n.partition(".")[0].encode() for n in req]))
            for kind, (table, names_of) in enumerate(kinds):
                for key, value in table.items():
                    if not value:
                        continue
                    module = key.rpartition("::")[2]
                    names = tuple(dict.fromkeys(names_of(value)))
                    last = _last(module) if module else b""
                    self._entries[kind][key] = (module, last, names)
                    self._by_last[kind].setdefault(last, []).append(key)
                    self._by_module[kind].setdefault(module, []).append(key)
                    needles.update(names)
                    needles.add(last)
            for m in facts.unmigrated_amp:
                last = _last(m)
                self._unmigrated_lasts.setdefault(last, []).append(m)
                needles.add(last)
            for key in facts.spawn_entries:
                name = str(key).rsplit(".", 1)[-1].encode()
                self._spawn.add(name)
                needles.add(name)
        needles.add(b"initialize")
        needles.add(b"apex")
        needles.add(b"raise")
        needles.add(b"assert")
        self._words: Set[bytes] = {n for n in needles if _WORD.match(n)}
        self._others: Tuple[bytes, ...] = tuple(n for n in needles if n not in self._words)  # b"", dots...
        self._lengths: Tuple[int, ...] = tuple(sorted({len(n) for n in self._words}))
        self._runs: Dict[bytes, FrozenSet[bytes]] = {}

    def _in_run(self, run: bytes) -> FrozenSet[bytes]:
        hit = self._runs.get(run)
        if hit is not None:
            return hit
        words, size = self._words, len(run)
        if size > _CACHED_RUN:  # a blob: one search per needle beats every slice of it
            return frozenset(n for n in words if n in run)
        found = frozenset(run[i:i + n] for n in self._lengths if n <= size
                          for i in range(size - n + 1) if run[i:i + n] in words)
        self._runs[run] = found
        return found

    def present(self, data: bytes) -> Set[bytes]:
        """The needles that occur in `data` (as `needle in data` says)."""
        out: Set[bytes] = {n for n in self._others if n in data}
        for run in set(_RUN.findall(data)):
            out.update(self._in_run(run))
        return out

    def mentions(self, data: bytes, module_name: str = "", skip_keys: Sequence[str] = ()) -> bool:
        """Exactly `prefilter.mentions_fact(data, facts, module_name, skip_keys)`."""
        facts = self.facts
        if not facts:
            return False
        has = self.present(data)
        prefixes = [module_name[:i] for i, c in enumerate(module_name) if c == "."]  # `module + "."` starts it
        for kind in (0, 1):
            entries = self._entries[kind]
            keys: List[str] = []
            for last in has:
                keys.extend(self._by_last[kind].get(last, ()))
            for p in prefixes:
                keys.extend(self._by_module[kind].get(p, ()))
            for key in keys:
                if key in skip_keys:
                    continue
                if any(n in has for n in entries[key][2]):
                    return True
        if module_name in facts.attr_candidates and any(k.startswith(module_name + ".") for k in facts.scaler_bases):
            return True
        if b"initialize" in has and any(m != module_name for last in has
                                        for m in self._unmigrated_lasts.get(last, ())):
            return True
        if b"apex" in has and (b"raise" in has or b"assert" in has) and \
                any(m != module_name for m in facts.unmigrated_amp):
            return True
        return any(n in has for n in self._spawn)
