"""The passes after pass 1 that look across files: which pass-1 rewrites stand, and which files run
pass 1 again, told what other files need (a re-exported import, a bf16 switch, a scaler parameter
another file cannot pass), so that a cross-module migration is written whole or not at all.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from codemods.base import RepoFacts

from . import checkpoint_facts, discovery, prefilter
from .cache_keys import PassMemo, cacheable, facts_digest
from .fileio import SourceError, read_bytes
from .facts_index import FactsIndex
from .pipeline import pass_one_file, process_file
from .results import FileResult
from .settings import RunConfig


def still_valid(files: Sequence[discovery.Discovered], early: Dict[int, FileResult],
                 published: Dict[int, RepoFacts], merged: RepoFacts,
                 data_of: Optional[Dict[int, bytes]] = None,
                 index: Optional[FactsIndex] = None) -> Dict[int, FileResult]:
    """The pass-1 rewrites that pass 2 would make the same: the file calls no function another file
    published (`prefilter.mentions_fact`: such a call names the function and its module). `data_of`:
    the files' bytes the screen kept (the others are read again); `index`: `merged`'s FactsIndex."""
    index = index if index is not None and index.facts is merged else FactsIndex(merged)
    publishers: Dict[str, int] = {}
    for f in published.values():
        for key in f.scaler_functions:
            publishers[key] = publishers.get(key, 0) + 1
    kept: Dict[int, FileResult] = {}
    for i, fr in early.items():
        # its own module's functions, unless another file (a.py beside a/__init__.py) shares the name
        own = tuple(k for k in published[i].scaler_functions if publishers[k] == 1) if i in published else ()
        own += tuple(published[i].scaler_required) if i in published else ()
        data = data_of.get(i) if data_of is not None else None
        if data is None:
            try:
                data = read_bytes(files[i].path)
            except SourceError:
                continue
        if not index.mentions(data, discovery.module_name_for(files[i].path)[0], own):
            kept[i] = fr
    return kept


def keep_reexported_imports(files: Sequence[discovery.Discovered], published: Dict[int, RepoFacts],
                             data_of: Dict[int, bytes], facts: RepoFacts, ready: Dict[int, FileResult],
                             walked: Sequence[str], pool: Any, cache: Any = None, keys: Sequence[Any] = ()) -> None:
    """The unused apex imports pass 1 removed that another file imports from their module
    (`pkg/__init__.py` re-exporting FusedAdam): recorded in `facts.reexports`, and their modules'
    pass-1 results dropped from `ready`, so pass 2 rewrites them again and keeps those imports. With
    `cache`, each run file's importers are kept for the next run."""
    from .reexports import find_importers, scan_task
    publishers: Dict[str, Set[str]] = {}
    for i, f in published.items():
        for key in f.dropped_imports:
            publishers.setdefault(key, set()).add(os.path.abspath(files[i].path))
    run_files = [(d.path, data_of.get(i)) for i, d in enumerate(files) if d.kind == discovery.PYTHON]
    mapper = (lambda tasks: pool.map(scan_task, tasks, scan_task, parallel=True)) if pool.jobs > 1 else None
    memo = None
    if cache is not None:
        context = repr((sorted((k, sorted(v)) for k, v in facts.dropped_imports.items()),
                        sorted((k, sorted(v)) for k, v in publishers.items())))
        memo = _ByPath(PassMemo(cache, keys, "reexports", context), files)
    facts.reexports = find_importers(facts.dropped_imports, run_files, publishers, walked, mapper, memo)
    for i, f in published.items():
        if any(key in facts.reexports for key in f.dropped_imports):
            ready.pop(i, None)


class _ByPath:
    """A PassMemo of the run's files, asked by path (files outside the run are not kept)."""

    def __init__(self, memo: PassMemo, files: Sequence[discovery.Discovered]):
        self.memo = memo
        self.index = {d.path: i for i, d in enumerate(files)}

    def get(self, path: str, data: bytes) -> Any:
        i = self.index.get(path)
        return None if i is None else self.memo.get(i, data)

    def put(self, path: str, data: bytes, value: Any) -> None:
        i = self.index.get(path)
        if i is not None:
            self.memo.put(i, data, value)


def refuse_bf16_regions_off_the_switch(files: Sequence[discovery.Discovered], indexed: Sequence[int],
                                        pass_one: Dict[int, Tuple[RepoFacts, Optional[FileResult]]],
                                        data_of: Dict[int, bytes], config: RunConfig, facts: RepoFacts,
                                        prior: Dict[int, RepoFacts]) -> None:
    """Pass 1 again, told which modules' `amp.initialize` is switched under --dtype bfloat16
    (`codemods.amp.BF16_SWITCHED`), for the files with a `scale_loss` that publish no such switch: their
    regions cannot follow it (no scaler carries it), so their amp migration refuses (A2A174), and the
    `amp.initialize` of the modules importing them stays with them (A2A117)."""
    from codemods.amp import BF16_SWITCHED
    switched = sorted({m for i in indexed for m in pass_one[i][0].extra.get(BF16_SWITCHED, [])})
    if not switched:
        return
    told = RepoFacts(extra={BF16_SWITCHED: switched})
    bytes_of = _bytes_reader(files, data_of)
    for j in indexed:
        if pass_one[j][0].extra.get(BF16_SWITCHED):
            continue
        data = bytes_of(j)
        if data is None:
            continue
        if b"scale_loss" in data:
            mine = RepoFacts(extra={BF16_SWITCHED: switched})
            if j in prior:  # what an earlier cross-module pass told this file still holds
                mine.merge(prior[j])
            prior[j] = mine
            pass_one[j] = pass_one_file(files[j], config, mine)
    facts.merge(told)


def hold_back_helpers(files: Sequence[discovery.Discovered], indexed: Sequence[int],
                       pass_one: Dict[int, Tuple[RepoFacts, Optional[FileResult]]], data_of: Dict[int, bytes],
                       config: RunConfig, prior: Dict[int, RepoFacts], cache: Any = None,
                       keys: Sequence[Any] = ()) -> None:
    """Backward helpers and setup helpers whose callers would keep their amp code keep theirs
    (migrate/helper_groups.py).
    With `cache`, whether a caller keeps its amp code is kept per file and facts for the next run."""

    def rerun(i: int, told: RepoFacts) -> Tuple[RepoFacts, Optional[FileResult]]:
        if i in prior:  # what an earlier cross-module pass told this file still holds
            told.merge(prior[i])
        prior[i] = told
        facts, fr = pass_one_file(files[i], config, told)
        held = {k: v for k, v in told.extra.items() if k.startswith((backward_helpers.HELD, init_helpers.HELD))}
        if held:  # pass 2 may rewrite the helper again (a caller's name in its text): it is told too
            both = RepoFacts()
            both.merge(facts)
            both.merge(RepoFacts(extra=held))
            facts = both
        return facts, fr

    from codemods import backward_helpers, init_helpers
    from .helper_groups import hold_back, keeps_amp

    bytes_of = _bytes_reader(files, data_of)
    memos: Dict[int, Tuple[RepoFacts, PassMemo]] = {}

    def keeps(j: int, facts: RepoFacts) -> bool:
        if cache is None:
            return keeps_amp(process_file(files[j], dataclasses.replace(config, write=False), facts))
        if id(facts) not in memos:
            memos[id(facts)] = (facts, PassMemo(cache, keys, "keeps_amp", facts_digest(facts)))
        memo, data = memos[id(facts)][1], bytes_of(j)
        kept = memo.get(j, data) if data is not None else None
        if kept is None:
            kept = keeps_amp(process_file(files[j], dataclasses.replace(config, write=False), facts))
            if data is not None:
                memo.put(j, data, kept)
        return bool(kept)

    python = [j for j, d in enumerate(files) if d.kind == discovery.PYTHON]
    hold_back(files, indexed, pass_one, bytes_of, python, keeps, rerun)
    # setup helpers: a caller keeping apex holds the helper's initialize
    hold_back(files, indexed, pass_one, bytes_of, python, keeps, rerun, init_helpers.PREFIX, init_helpers.HELD,
              init_helpers.CALLED)


def refuse_foreign_method_calls(files: Sequence[discovery.Discovered], indexed: Sequence[int],
                                 pass_one: Dict[int, Tuple[RepoFacts, Optional[FileResult]]],
                                 data_of: Dict[int, bytes], config: RunConfig, facts: RepoFacts,
                                 cache: Any = None, keys: Sequence[Any] = ()) -> Dict[int, RepoFacts]:
    """Pass 1 again, in this process, for the files whose methods got a scaler parameter that another
    file references, or whose module-level functions did and another file uses as a value
    (`migrate.method_refs`): told so, their amp migration refuses instead. With `cache`, each file's
    value uses are kept for the next run."""
    published = {i: pass_one[i][0] for i in indexed if pass_one[i][0].scaler_methods}
    exporting = {i: pass_one[i][0] for i in indexed if pass_one[i][0].scaler_functions}
    if not published and not exporting:
        return {}
    from .method_refs import foreign_refs, foreign_value_refs

    bytes_of = _bytes_reader(files, data_of)

    python = [j for j, d in enumerate(files) if d.kind == discovery.PYTHON]
    told: Dict[int, RepoFacts] = {}
    for i, found in foreign_refs(published, python, bytes_of).items():
        told.setdefault(i, RepoFacts()).foreign_method_refs.update(found)
    value_memo = None
    if cache is not None and exporting:
        from .held_callers import Exporters
        value_memo = PassMemo(cache, keys, "value_refs",
                              Exporters.of_scaler_functions(exporting, lambda j: files[j].path).context())
    for i, found in foreign_value_refs(exporting, python, bytes_of, lambda j: files[j].path, value_memo).items():
        told.setdefault(i, RepoFacts()).foreign_value_refs.update(found)
    for i, t in told.items():
        pass_one[i] = pass_one_file(files[i], config, t)
        facts.merge(t)
    return told


def _bytes_reader(files: Sequence[discovery.Discovered], data_of: Dict[int, bytes]) -> Callable[[int], Optional[bytes]]:
    """Reads file j's bytes, from what pass 1 kept when it kept them (None: unreadable)."""
    def bytes_of(j: int) -> Optional[bytes]:
        data = data_of.get(j)
        if data is None:
            try:
                data = read_bytes(files[j].path)
            except SourceError:
                return None
        return data
    return bytes_of


def refuse_held_callers(files: Sequence[discovery.Discovered], indexed: Sequence[int],
                         pass_one: Dict[int, Tuple[RepoFacts, Optional[FileResult]]], data_of: Dict[int, bytes],
                         config: RunConfig, facts: RepoFacts, told: Dict[int, RepoFacts], cache: Any = None,
                         keys: Sequence[Any] = ()) -> Dict[int, Tuple[str, FileResult]]:
    """Pass 1 again for the files whose functions got a scaler parameter that a call in another file
    would still not pass after pass 2 (`migrate.held_callers`): told so, they keep the signature and
    their amp code; repeated while a refusal makes another module keep apex."""
    simulated: Dict[int, Tuple[str, FileResult]] = {}  # file -> (facts digest, its rewrite with those facts)
    if not any(pass_one[i][0].scaler_functions for i in indexed):
        return simulated
    from .held_callers import held_calls

    bytes_of = _bytes_reader(files, data_of)
    python = [j for j, d in enumerate(files) if d.kind == discovery.PYTHON]
    for round_ in range(len(indexed)):
        run_facts = RepoFacts()
        for i in indexed:
            run_facts.merge(pass_one[i][0])
        for t in told.values():
            run_facts.merge(t)
        exporting = {i: pass_one[i][0] for i in indexed if pass_one[i][0].scaler_functions}
        texts: Dict[int, Optional[str]] = {}
        digest_now = facts_digest(run_facts)

        def rewritten(j: int, run_facts: RepoFacts = run_facts, texts: Dict[int, Optional[str]] = texts,
                      digest_now: str = digest_now) -> Optional[str]:
            """The text pass 2 would write for file j with these facts (None: unchanged); pass 2 takes
            this rewrite (here, or from the cache next time) when its facts are the same."""
            if j not in texts:
                key = keys[j] if j < len(keys) else None
                fr = cache.get(key, "pass2:" + digest_now) if cache and key is not None else None
                if fr is None:
                    fr = pass_one_file(files[j], config, run_facts)[1]
                    if cache and cacheable(fr, key):
                        cache.put(key, "pass2:" + digest_now, fr)
                if fr is not None:
                    simulated[j] = (digest_now, fr)
                texts[j] = fr.new_text if fr is not None and fr.changed else None
            return texts[j]

        memo = None
        if cache is not None:
            from .held_callers import Exporters
            context = Exporters.of_scaler_functions(exporting, lambda j: files[j].path).context()
            memo = PassMemo(cache, keys, f"held_calls{round_}", f"{digest_now} {context}")
        again = []
        for i, by_key in held_calls(exporting, python, lambda j: files[j].path, bytes_of, rewritten, memo).items():
            t = told.setdefault(i, RepoFacts())
            for key, refs in by_key.items():
                known = t.held_callers.setdefault(key, [])
                fresh = [r for r in refs if r not in known]
                if fresh:
                    known.extend(fresh)
                    if i not in again:
                        again.append(i)
        if not again:
            return simulated
        for i in again:
            pass_one[i] = pass_one_file(files[i], config, told[i])
            facts.merge(told[i])
    return {}  # no fixed point within the bound: pass 2 rewrites every file afresh


def refuse_helpers_of_unmigrated(files: Sequence[discovery.Discovered], indexed: Sequence[int],
                                  pass_one: Dict[int, Tuple[RepoFacts, Optional[FileResult]]],
                                  data_of: Dict[int, bytes], config: RunConfig, facts: RepoFacts,
                                  prior: Dict[int, RepoFacts]) -> None:
    """Pass 1 again for the files whose functions got a scaler parameter that a module keeping its apex
    amp code calls (`codemods.amp.CALLERS_KEEP_AMP`): told so, their amp migration refuses too, since
    the cross-module migration is written whole or not at all (Swin's utils.save_checkpoint, main.py held)."""
    from codemods.amp import CALLERS_KEEP_AMP

    def settled(j: int) -> bool:  # left unmigrated for good, not waiting for pass 2's facts
        fr = pass_one[j][1]
        return fr is None or not (waits_for_a_helper(fr) or checkpoint_facts.waits_for_helper(fr))

    keeping = {m for j in indexed if settled(j) for m in pass_one[j][0].unmigrated_amp}
    publishers = [i for i in indexed if pass_one[i][0].scaler_functions]
    if not keeping or not publishers:
        return
    callers = [(j, discovery.module_name_for(files[j].path)[0]) for j in indexed]
    callers = [(j, m) for j, m in callers if m in keeping]
    told: Dict[str, List[str]] = {}
    bytes_of = _bytes_reader(files, data_of)
    for i in publishers:
        own = RepoFacts(scaler_functions=dict(pass_one[i][0].scaler_functions))
        for j, module in callers:
            if j == i:
                continue
            data = bytes_of(j)
            if data is None:
                continue
            if prefilter.mentions_fact(data, own, module):
                for key in own.scaler_functions:
                    told.setdefault(key, []).append(module)
    if not told:
        return
    extra = RepoFacts(extra={CALLERS_KEEP_AMP: told})
    for i in publishers:
        if any(key in told for key in pass_one[i][0].scaler_functions):
            mine = RepoFacts(extra={CALLERS_KEEP_AMP: told})
            if i in prior:  # what `refuse_foreign_method_calls` told this file still holds
                mine.merge(prior[i])
            prior[i] = mine
            pass_one[i] = pass_one_file(files[i], config, mine)
    facts.merge(extra)


def waits_for_a_helper(fr: FileResult) -> bool:
    """Whether a pass-1 result held an `amp.initialize` (or a backward) because no function of the run
    takes the scaler (A2A124): a helper already on torch.amp may be that function."""
    return any(f.code == "A2A124" for f in fr.findings)


def native_facts_of_helpers(files: Sequence[discovery.Discovered], published: Dict[int, RepoFacts],
                  data_of: Dict[int, bytes], held: Sequence[int]) -> Tuple[Dict[int, RepoFacts], RepoFacts]:
    """The facts of the helpers already on torch.amp (codemods/native_scaler.py): by position for the
    files of the run (those whose own apex code published scaler functions are left out), and merged
    for the project files outside the run that the `held` files import (pre-commit passes only the
    staged files; the helper may have been committed on its own before)."""
    from codemods.native_scaler import may_have_helpers, native_facts

    read: Dict[str, Optional[bytes]] = {}  # the held files are read by both loops below

    def bytes_of(i: int, path: str) -> Optional[bytes]:
        data = data_of.get(i) if i >= 0 else None
        if data is None and path not in read:
            try:
                read[path] = read_bytes(path)
            except SourceError:
                read[path] = None
        return data if data is not None else read[path]

    inside: Dict[int, RepoFacts] = {}
    for i, d in enumerate(files):
        if d.kind != discovery.PYTHON or (i in published and published[i].scaler_functions):
            continue
        data = bytes_of(i, d.path)
        if not data or not may_have_helpers(data):  # the module name costs more than this test
            continue
        facts = native_facts(data, d.path, discovery.module_name_for(d.path)[0])
        if facts.scaler_functions:
            inside[i] = facts
    outside = RepoFacts()
    in_run = {os.path.abspath(d.path) for d in files}
    for i in held:
        data = bytes_of(i, files[i].path)
        for path in discovery.imported_files(files[i].path, data) if data else ():
            if path in in_run:
                continue
            in_run.add(path)
            other = bytes_of(-1, path)
            if other and may_have_helpers(other):
                outside.merge(native_facts(other, path, discovery.module_name_for(path)[0]))
    return inside, outside
