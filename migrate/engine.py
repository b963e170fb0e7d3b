"""The run orchestrator: discovery, the cheap screen of every file's bytes, pass 1 (in the pool),
the cross-module passes (migrate/cross_module.py), pass 2, the result cache, grouped writes.

One file's path through the tool is migrate/pipeline.py (by kind) over migrate/source_rewrite.py
(one Python text); this module re-exports their public names, so `migrate.engine` stays the API.
"""
from __future__ import annotations

import gc
import os
import pickle
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from codemods.base import Finding, Options, RepoFacts  # noqa: F401 - re-exported
from codemods.suppression import physical_lines  # noqa: F401 - re-exported

from . import apex_shadow, checkpoint_facts, cross_module, discovery, half_outside, prefilter, progress, vendored_users
from .cache_keys import FinalTexts, cache_key, cacheable, facts_digest, open_cache
from .fileio import SourceError, decode_error, read_bytes
from .facts_index import FactsIndex
from .pipeline import pass_one_file, process_file, slim, write_later  # noqa: F401 - re-exported
from .results import FileResult, RunResult  # noqa: F401 - re-exported
from .settings import QUIET_GC, RunConfig, Selection  # noqa: F401 - re-exported: the engine's API takes them
from .source_rewrite import Result, _line_map, codemod_registry, guard, rewrite_source, selection_for  # noqa: F401


# What the cheap screen of a file decided: nothing to do, pass 2 only (launch scripts and notebooks,
# which read the facts of every Python file), or pass 1 (every Python file a codemod wants).
_SKIP, _REWRITE, _PASS_ONE = 0, 1, 2


def _screen_bytes(d: discovery.Discovered, config: RunConfig, data: bytes) -> Tuple[int, Optional[FileResult]]:
    """Decode one file's bytes and decide from them which passes it needs.

    Every file is read and decoded (so binary, undecodable and unreadable files are always
    reported), but nothing is parsed here and no text is kept.
    """
    why = decode_error(d.path, data, d.kind == discovery.PYTHON)
    if why is not None:
        return _SKIP, FileResult(d.path, d.kind, error=why)
    if not config.prefilter:
        return (_PASS_ONE if d.kind == discovery.PYTHON else _REWRITE), None
    if d.kind != discovery.PYTHON:
        return (_REWRITE if codemod_registry().may_need_work(data) else _SKIP), None
    codemods, select = codemod_registry().CODEMODS, selection_for(d.path, d.root, config)
    present = prefilter.candidate(data, codemods, select)
    if present is None:
        return _SKIP, None
    wanted = prefilter.codemods_for(data, codemods, select, module_name=discovery.module_name_for(d.path)[0],
                                    present=present)
    if not wanted:
        return _SKIP, None
    # Every Python candidate goes to pass 1, not only those of fact-publishing codemods: a file's
    # pass-1 rewrite stands unless it names a fact another file published (`cross_module.still_valid`),
    # so the files that need no facts are not held back behind pass 1, and pass 1 and 2 do not wait
    # on each other.
    return _PASS_ONE, None


def _pass_one_task(task: Tuple[discovery.Discovered, RunConfig]) -> Tuple[RepoFacts, Optional[FileResult]]:
    try:
        return pass_one_file(*task)
    except BaseException as e:  # noqa: B036 - pass 1 is best effort
        guard(e)
        return RepoFacts(), None


_FACTS: List[Tuple[bytes, RepoFacts]] = []  # the facts of the latest pass-2 task (their pickle, them)


def _facts_of(shared: bytes) -> RepoFacts:
    """The pass-2 facts a task carries pickled: unpickled once per worker (every task of a run carries the
    same bytes), so the files of a worker share one facts object, as those of an in-process run do."""
    if not _FACTS or _FACTS[0][0] != shared:
        _FACTS[:] = [(shared, pickle.loads(shared))]
    return _FACTS[0][1]


def _process_task(task: Tuple[discovery.Discovered, RunConfig, bytes]) -> FileResult:
    d = task[0]
    try:
        return slim(process_file(d, task[1], _facts_of(task[2])))
    except BaseException as e:  # noqa: B036
        guard(e)
        return FileResult(d.path, d.kind, error=f"internal error: {type(e).__name__}: {e}")


def _pass_one_crashed(task: Tuple[discovery.Discovered, RunConfig]) -> Tuple[RepoFacts, Optional[FileResult]]:
    return RepoFacts(), None  # pass 2 tries the file again and reports it


def _process_crashed(task: Tuple[discovery.Discovered, RunConfig, bytes]) -> FileResult:
    d = task[0]
    return FileResult(d.path, d.kind, error="internal error: the worker process crashed on this file; "
                                            "file left unchanged")


def run(paths: Sequence[str], config: RunConfig,
        on_result: Optional[Callable[[FileResult], None]] = None) -> RunResult:
    """Process every file under `paths`; results come back (and stream to `on_result`) in path order.

    Every file is read and screened from its bytes (in the workers of a big run, in this process
    otherwise); only the files that need libcst are parsed, in worker processes when there are
    enough of them (`config.jobs`), in-process otherwise. Pass 1 rewrites the files a fact-publishing codemod wants and gathers
    their facts; pass 2 rewrites the other files, and again those of pass 1 that name a fact
    another file published. Each file is parsed once unless it is rewritten again in pass 2.

    """
    with _quiet_gc():
        return _run(paths, config, on_result)


@contextmanager
def _quiet_gc() -> Iterator[None]:
    """Collect garbage less often during a run (forked workers inherit it).

    libcst trees are large, short-lived and acyclic: reference counting frees them, while the
    default collector would rescan every live tree thousands of times (a quarter of the run).
    """
    old = gc.get_threshold()
    gc.set_threshold(*(max(a, b) for a, b in zip(old, QUIET_GC)))
    try:
        yield
    finally:
        gc.set_threshold(*old)


def _run(paths: Sequence[str], config: RunConfig,
         on_result: Optional[Callable[[FileResult], None]] = None) -> RunResult:
    from .pool import FilePool
    discovery.forget_packages()  # __init__.py files may have come or gone since the last run
    apex_shadow.forget()  # and local apex.py files
    cache = open_cache(config)
    with FilePool(config.jobs, initializer=_warm_worker) as pool:
        files = list(discovery.discover(paths, config.excludes))
        keys: List[Any] = [None] * len(files)
        kept = KeptBytes()  # bytes of skipped and pass-1 files, for the fact checks after pass 1
        result = RunResult(scanned=len(files))
        progress.stage(on_result, "screening", len(files), files=len(files))
        screened = _screen_all(files, config, cache, keys, kept, pool, on_result)
        facts = RepoFacts()
        published: Dict[int, RepoFacts] = {}
        ready: Dict[int, FileResult] = {}  # results made before pass 2's pool (written, if asked, below)
        indexed = [i for i, (step, _) in enumerate(screened) if step == _PASS_ONE]
        pass_one = {i: cache.get(keys[i], "pass1") for i in indexed} if cache else {}
        todo1 = [i for i in indexed if pass_one.get(i) is None]
        progress.stage(on_result, "pass 1", len(todo1))
        done1 = list(zip(todo1, progress.ticking(pool.map(
            _pass_one_task, [(files[i], config) for i in todo1], _pass_one_crashed, weight=_file_weight,
            batch_under=LIGHT_FILE), on_result)))
        for i, res in done1:
            pass_one[i] = res
            if cache and cacheable(res[1], keys[i]):
                cache.put(keys[i], "pass1", res)
        told = cross_module.refuse_foreign_method_calls(files, indexed, pass_one, kept, config, facts, cache, keys)
        cross_module.refuse_bf16_regions_off_the_switch(files, indexed, pass_one, kept, config, facts, told)
        cross_module.refuse_helpers_of_unmigrated(files, indexed, pass_one, kept, config, facts, told)
        cross_module.hold_back_helpers(files, indexed, pass_one, kept, config, told, cache, keys)
        simulated = cross_module.refuse_held_callers(files, indexed, pass_one, kept, config, facts, told, cache, keys)
        for i in indexed:
            f, fr = pass_one[i]
            facts.merge(f)
            published[i] = f
            if fr is not None:
                ready[i] = fr
        _note_torchrun_scripts(files, screened, [pass_one[i][1] for i in indexed], facts)
        held = [i for i, fr in ready.items() if cross_module.waits_for_a_helper(fr)]
        if held:
            inside, outside = cross_module.native_facts_of_helpers(files, published, kept, held)
            for i, native in inside.items():
                both = RepoFacts()
                both.merge(published.get(i) or RepoFacts())
                both.merge(native)
                published[i] = both
                facts.merge(native)
            facts.merge(outside)
        waiting = [i for i, fr in ready.items() if checkpoint_facts.waits_for_helper(fr)]
        if waiting:
            facts.merge(checkpoint_facts.helper_facts(files, kept, waiting))
        for i in [i for i, fr in ready.items() if i in waiting or checkpoint_facts.waits_for_restore(fr, facts)]:
            ready.pop(i)  # pass 2 reads the file again, with the facts
        if prefilter.has_fact_names(facts):
            needles = prefilter.fact_needles(facts)
            index = FactsIndex(facts)  # one look per file, not one per publishing module
            screened = [_rescreen(d, s, facts, kept.get(i), needles, index)
                        for i, (d, s) in enumerate(zip(files, screened))]
            ready = cross_module.still_valid(files, ready, published, facts, kept, index)
        if facts.dropped_imports:
            # folders the run walked whole need no second walk (excluded files may still import)
            cross_module.keep_reexported_imports(files, published, kept, facts, ready, [] if config.excludes else paths,
                                                 pool, cache, keys)
        pass_two = "pass2:" + facts_digest(facts) if cache else ""
        if simulated:
            final = facts_digest(facts)
            for i, (digest_of, fr) in simulated.items():
                if digest_of == final and i not in ready and screened[i][0] != _SKIP:
                    ready[i] = fr  # the rewrite the held-caller check made with these very facts
        for i, (step, _) in enumerate(screened):
            if cache and step != _SKIP and i not in ready and keys[i] is not None:
                hit = cache.get(keys[i], pass_two)
                if hit is not None:
                    ready[i] = hit
        todo = [i for i, (step, _) in enumerate(screened) if step != _SKIP and i not in ready]
        # the workers write nothing: every write happens below, in groups (migrate/write_groups.py)
        no_write = replace(config, write=False) if config.write else config
        shared = pickle.dumps(facts, protocol=pickle.HIGHEST_PROTOCOL) if todo else b""  # once, not once per task
        processed = pool.map(_process_task, [(files[i], no_write, shared) for i in todo], _process_crashed,
                             weight=_file_weight, batch_under=LIGHT_FILE)
        to_write: List[Tuple[int, discovery.Discovered, FileResult]] = []
        progress.stage(on_result, "pass 2", len(files))
        for i, (d, (step, early)) in enumerate(zip(files, screened)):
            if step == _SKIP:
                fr = early or FileResult(d.path, d.kind)
            elif i in ready:
                fr = ready.pop(i)
            else:
                fr = next(processed)
                if cache and not config.write and cacheable(fr, keys[i]):  # written results carry the write
                    cache.put(keys[i], pass_two, fr)
            if config.write and fr.changed:
                to_write.append((i, d, fr))
            fr.source_digest = None
            result.files.append(fr)
            if on_result:
                on_result(fr)
        vendored_users.annotate(result.files)  # who still imports a copy of apex's scaler classes
        # fp16 casts the migrated autocast regions no longer cover (per-file answers kept in the cache)
        half_outside.report(result.files, config, FinalTexts(files, keys, kept, cache))
    _FACTS.clear()  # an in-process pass 2 kept them
    if cache:
        cache.save()
    if to_write:
        from .write_groups import group_writes, write_in_groups
        write_in_groups(group_writes(to_write, files, published, facts), write_later)
    return result


def _note_torchrun_scripts(files: Sequence[discovery.Discovered], screened: List[Tuple[int, Optional[FileResult]]],
                           results: Sequence[Optional[FileResult]], facts: RepoFacts) -> None:
    """The scripts whose mp.spawn pass 1 moved to torchrun go into the facts, and the launch files
    naming them into pass 2 (their `python SCRIPT.py` lines: migrate/launch_torchrun.py)."""
    from .launch_torchrun import FACT, mentions_moved_script, scripts_moved_to_torchrun
    moved = scripts_moved_to_torchrun(fr for fr in results if fr is not None)
    if not moved:
        return
    facts.extra[FACT] = moved
    for i, d in enumerate(files):
        if d.kind != discovery.PYTHON and screened[i] == (_SKIP, None):
            try:
                data = read_bytes(d.path)
            except SourceError:
                continue
            if mentions_moved_script(data, moved):
                screened[i] = (_REWRITE, None)


def files_to_parse(paths: Sequence[str], config: Optional[RunConfig] = None) -> List[str]:
    """The Python files under `paths` that a run's pass 1 parses with libcst (the cheap screen of
    their bytes wants them). Pass 2 may parse a few more, for facts pass 1 publishes."""
    config = config or RunConfig()
    python = [d for d in discovery.discover(paths, config.excludes) if d.kind == discovery.PYTHON]
    return [python[i].path for i, (step, _), _ in _screen_task((list(enumerate(python)), config)) if step == _PASS_ONE]


def _warm_worker() -> None:
    """A worker's first step: import what screening and rewriting need."""
    codemod_registry()


class KeptBytes(Dict[int, bytes]):
    """File bytes by position in the run, while they add up to at most LIMIT bytes."""

    LIMIT = 32_000_000

    def __init__(self) -> None:
        super().__init__()
        self.total = 0

    def keep(self, i: int, data: bytes) -> None:
        if self.total + len(data) <= self.LIMIT:
            self[i] = data
            self.total += len(data)


LIGHT_FILE = 4096  # files lighter than this go to pass-1 and pass-2 workers a few at a time (FilePool.map)
SCREEN_CHUNK = 128  # at most this many files per screening task in the pool (4 tasks per worker at least)
MIN_POOL_SCREEN = 256  # fewer files to screen than this are screened in this process


def _screen_all(files: Sequence[discovery.Discovered], config: RunConfig, cache: Any, keys: List[Any],
                kept: KeptBytes, pool: Any, bar: Any = None) -> List[Tuple[int, Optional[FileResult]]]:
    """Each file's screen, in order. Files the cache does not answer are screened in the pool when
    they are many (a big tree with few candidates spends its time here), in this process otherwise."""
    screened: List[Optional[Tuple[int, Optional[FileResult]]]] = [None] * len(files)
    data_of: Dict[int, bytes] = {}
    if cache is None:
        todo = list(range(len(files)))
    else:
        todo = []
        for i, d in enumerate(files):
            hit = _screen_from_cache(d, cache, keys, i, data_of)
            if hit is None:
                todo.append(i)
            else:
                screened[i] = _kept_screen(hit, d, i, data_of.pop(i, None), kept)
    progress.advance(bar, len(files) - len(todo))  # answered by the cache
    if len(todo) >= MIN_POOL_SCREEN and pool.parallel_for(len(todo)):
        size = min(SCREEN_CHUNK, -(-len(todo) // (4 * pool.jobs)))
        chunks = [[(i, files[i]) for i in todo[a:a + size]] for a in range(0, len(todo), size)]
        for chunk in progress.ticking(pool.map(_screen_task, [(c, config) for c in chunks], _screen_crashed,
                                               parallel=True), bar, len):
            for i, one, digest in chunk:
                data = data_of.pop(i, None)
                if cache is not None and keys[i] is not None and digest == keys[i][2]:
                    cache.put(keys[i], "screen", one)  # screened from the bytes the key names
                screened[i] = _kept_screen(one, files[i], i, data, kept)
    else:
        for i in progress.ticking(todo, bar):
            d = files[i]
            data = data_of.pop(i, None)
            if data is None:
                try:
                    data = read_bytes(d.path)
                except SourceError as e:
                    screened[i] = (_SKIP, FileResult(d.path, d.kind, error=str(e)))
                    continue
            one = _screen_bytes(d, config, data)
            if cache is not None and keys[i] is not None:
                cache.put(keys[i], "screen", one)
            screened[i] = _kept_screen(one, d, i, data, kept)
    return screened  # type: ignore[return-value]


def _screen_from_cache(d: discovery.Discovered, cache: Any, keys: List[Any], i: int,
                       data_of: Dict[int, bytes]) -> Optional[Tuple[int, Optional[FileResult]]]:
    """The cached screen of the file's bytes (keys[i] gets the file's key, data_of[i] its bytes),
    a read error, or None when the bytes were not screened before."""
    try:
        data = read_bytes(d.path)
    except SourceError as e:
        return _SKIP, FileResult(d.path, d.kind, error=str(e))
    from .cache import digest
    keys[i] = key = cache_key(d, digest(data))
    data_of[i] = data
    return cache.get(key, "screen")


def _kept_screen(screened: Tuple[int, Optional[FileResult]], d: discovery.Discovered, i: int,
                 data: Optional[bytes], kept: KeptBytes) -> Tuple[int, Optional[FileResult]]:
    """`screened`, after keeping the bytes of a skipped or pass-1 Python file (while they fit)."""
    if data is not None and screened[0] in (_SKIP, _PASS_ONE) and screened[1] is None \
            and d.kind == discovery.PYTHON:
        kept.keep(i, data)
    return screened


def _screen_task(task: Tuple[List[Tuple[int, discovery.Discovered]], RunConfig]
                 ) -> List[Tuple[int, Tuple[int, Optional[FileResult]], Optional[bytes]]]:
    """Screen a chunk of files in a worker: (index, screen, digest of the bytes screened)."""
    chunk, config = task
    out = []
    for i, d in chunk:
        try:
            data = read_bytes(d.path)
        except SourceError as e:
            out.append((i, (_SKIP, FileResult(d.path, d.kind, error=str(e))), None))
            continue
        one = _screen_bytes(d, config, data)
        if config.cache_dir is not None:
            from .cache import digest
            out.append((i, one, digest(data)))
        else:
            out.append((i, one, None))
    return out


def _screen_crashed(task: Tuple[List[Tuple[int, discovery.Discovered]], RunConfig]
                    ) -> List[Tuple[int, Tuple[int, Optional[FileResult]], Optional[bytes]]]:
    """A chunk whose worker died: screened again here (reading and screening run no native code)."""
    return _screen_task(task)


def _file_weight(task: Tuple[Any, ...]) -> float:
    """Bytes of the task's file (big files first in the pool)."""
    try:
        return float(os.path.getsize(task[0].path))
    except OSError:
        return 0.0


def _rescreen(d: discovery.Discovered, screened: Tuple[int, Optional[FileResult]], facts: RepoFacts,
              data: Optional[bytes] = None, needles: Optional[Tuple[bytes, ...]] = None,
              index: Optional[FactsIndex] = None) -> Tuple[int, Optional[FileResult]]:
    """After pass 1: a skipped file that names a function pass 1 published (a call site) needs pass 2
    (`data`: its bytes when the screen kept them; `needles`: `prefilter.fact_needles(facts)`)."""
    step, early = screened
    if step != _SKIP or early is not None or d.kind != discovery.PYTHON:
        return screened
    if data is None:
        try:
            data = read_bytes(d.path)
        except SourceError:
            return screened
    if needles is not None and not any(n in data for n in needles):
        return screened
    module = discovery.module_name_for(d.path)[0]
    mentions = index.mentions(data, module) if index is not None and index.facts is facts \
        else prefilter.mentions_fact(data, facts, module)
    return (_REWRITE if mentions else _SKIP), None
