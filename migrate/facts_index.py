"""An index of the facts pass 1 published, so that asking whether a file may use one costs about a
read of the file, however many files published facts.

`FactsIndex(facts).mentions(data, module_name, skip_keys)` answers exactly what
`prefilter.mentions_fact(data, facts, module_name, skip_keys)` answers. The plain check searches the
file once per publishing module (its last name) and once per published function, so a run whose
tree has 20x the apex files paid 20x per file, 400x in all. Here every name a check may search for is
a needle, found in the file in one pass (`migrate.name_search`), and the keys are looked up from the
needles found, grouped by the names their calls spell, so the many copies of one package that publish
the same names under different modules cost one look, not one each.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Set

from codemods import amp_object_attr, init_helpers
from codemods.records import RepoFacts

from .name_search import NameSearch


def _last(module: str) -> bytes:
    return module.rpartition(".")[2].encode()


class FactsIndex:
    """The facts of one run (fixed once built), indexed by the names their checks search for."""

    def __init__(self, facts: Optional[RepoFacts]):
        self.facts = facts
        # per kind: the keys by the last name of their module (or by their module), then by a name a
        # call of theirs spells (copies of one package publish the same names under many modules)
        self._by_last: List[Dict[bytes, Dict[bytes, List[str]]]] = [{}, {}]
        self._by_module: List[Dict[str, Dict[bytes, List[str]]]] = [{}, {}]
        self._base_prefixes: Set[str] = set()  # `m` with some scaler_bases key starting `m + "."`
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
                    for name in names:
                        self._by_last[kind].setdefault(last, {}).setdefault(name, []).append(key)
                        self._by_module[kind].setdefault(module, {}).setdefault(name, []).append(key)
                    needles.update(names)
                    needles.add(last)
            for m in facts.unmigrated_amp:
                last = _last(m)
                self._unmigrated_lasts.setdefault(last, []).append(m)
                needles.add(last)
            for key in facts.scaler_bases:
                self._base_prefixes.update(key[:i] for i, c in enumerate(key) if c == ".")
            for key in facts.spawn_entries:
                name = str(key).rsplit(".", 1)[-1].encode()
                self._spawn.add(name)
                needles.add(name)
        # `.attr` of each apex amp handle a pass-1 fact stores on an object (amp_object_attr.mentions)
        self._attr_needles = tuple(amp_object_attr.needles(facts.extra)) if facts else ()
        # and the names of other modules' setup helpers (codemods/init_helpers.py): their callers need pass 2
        self._attr_needles += tuple(init_helpers.needles(facts.extra)) if facts else ()
        needles.update(self._attr_needles)
        needles.add(b"initialize")
        needles.add(b"apex")
        needles.add(b"raise")
        needles.add(b"assert")
        needles.add(b"spawn")
        self._search = NameSearch(needles)

    def present(self, data: bytes) -> Set[bytes]:
        """The needles that occur in `data` (as `needle in data` says)."""
        return self._search.present(data)

    def mentions(self, data: bytes, module_name: str = "", skip_keys: Sequence[str] = ()) -> bool:
        """Exactly `prefilter.mentions_fact(data, facts, module_name, skip_keys)`."""
        facts = self.facts
        if not facts:
            return False
        has = self.present(data)
        prefixes = [module_name[:i] for i, c in enumerate(module_name) if c == "."]  # `module + "."` starts it
        for kind in (0, 1):
            groups = [self._by_last[kind].get(last) for last in has]
            groups += [self._by_module[kind].get(p) for p in prefixes]
            for by_name in groups:
                for name, keys in (by_name or {}).items():
                    # a key is reached when the file holds one of its names; skip_keys are few
                    if name in has and any(key not in skip_keys for key in keys):
                        return True
        if module_name in facts.attr_candidates and module_name in self._base_prefixes:
            return True
        if b"initialize" in has and any(m != module_name for last in has
                                        for m in self._unmigrated_lasts.get(last, ())):
            return True
        if b"apex" in has and (b"raise" in has or b"assert" in has) and \
                any(m != module_name for m in facts.unmigrated_amp):
            return True
        if b"spawn" in has and any(n in has for n in self._spawn):  # only a file that spawns reads them
            return True
        return any(n in has for n in self._attr_needles)  # apex amp stored on an object (amp_object_attr.mentions)
