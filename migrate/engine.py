"""The two-pass engine: prefilter, pass 1 (files that may publish repo facts), pass 2, safety gate, write.

`rewrite_source` is the pure core used by everything else: text in, new text and findings out.
`run` drives a whole tree: discovery, repo facts, per-file handlers by kind, atomic writes.
"""
from __future__ import annotations

import dataclasses
import difflib
import gc
import os
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from collections.abc import Mapping
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple

import libcst as cst
from libcst.metadata import MetadataWrapper

from codemods.base import FileContext, Finding, Options, RepoFacts
from codemods.index import ModuleIndex
from codemods.suppression import Suppressions, physical_lines

from . import apex_shadow, checkpoint_facts, discovery, prefilter, progress, selection
from .fileio import Source, SourceError, decode_error, decode_python, decode_text, read_bytes, write_atomic
from .facts_index import FactsIndex
from .linediff import shared_ends
from .settings import QUIET_GC, RunConfig, Selection  # noqa: F401 - re-exported: the engine's API takes them


@dataclass
class Result:
    """Outcome of rewriting one source text."""

    old_text: str
    new_text: str
    findings: List[Finding] = field(default_factory=list)
    error: Optional[str] = None
    launch_notes: List[Dict[str, Any]] = field(default_factory=list)
    exported: RepoFacts = field(default_factory=RepoFacts)  # facts this file publishes for the others

    @property
    def changed(self) -> bool:
        return self.error is None and self.new_text != self.old_text


def _line_map(old: str, new: str) -> List[int]:
    """For each 1-based line of `new`, the 1-based line of `old` it comes from (or is nearest to).

    The lines both texts begin and end with map to each other as they are; difflib aligns only the
    lines between (a rewrite changes a few lines of a long file: difflib over the whole of both cost
    more than the rewrite of a region)."""
    a, b = physical_lines(old), physical_lines(new)
    out = [0] * (len(b) + 2)
    head, tail = shared_ends(a, b)
    for k in range(head):
        out[k + 1] = k + 1
    for k in range(tail):
        out[len(b) - k] = len(a) - k
    sm = difflib.SequenceMatcher(None, a[head:len(a) - tail], b[head:len(b) - tail], autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        i1, i2, j1, j2 = i1 + head, i2 + head, j1 + head, j2 + head
        for k in range(j1, j2):
            if tag == "equal":
                out[k + 1] = i1 + (k - j1) + 1
            else:
                out[k + 1] = min(i1 + (k - j1), max(i2 - 1, i1)) + 1
    out[len(b) + 1] = len(a) + 1
    return out


def _compose(maps: List[List[int]], line: int) -> int:
    for m in reversed(maps):
        if 0 < line < len(m):
            line = m[line]
    return line


def _parse(text: str) -> cst.Module:
    return cst.parse_module(text)


def _python_parse_error(text: str) -> Optional[str]:
    """Why CPython's own parser rejects `text`, or None when it parses."""
    import ast
    try:
        ast.parse(text)
    except SyntaxError as e:
        return f"syntax error at line {e.lineno}: {e.msg}"
    except (ValueError, RecursionError, MemoryError) as e:
        return f"cannot parse: {e}"
    return None


def _parse_error(e: Exception, text: Optional[str] = None) -> str:
    """Why `text` does not parse; at CPython's line and column (libcst's lag a line behind when a
    statement is cut short) when CPython's own parser rejects it too."""
    if isinstance(e, cst.ParserSyntaxError):
        if text is not None:
            import ast
            try:
                ast.parse(text)
            except SyntaxError as why:
                return f"syntax error at line {why.lineno or 0}, column {why.offset or 0}: {why.msg}"
            except (ValueError, RecursionError, MemoryError):
                pass
        msg = str(e).strip().splitlines()
        head = msg[0] if msg else "syntax error"
        return f"syntax error at line {e.raw_line}, column {e.raw_column}: {head}"
    return f"cannot parse: {e}"


def _registry() -> Any:
    """`codemods.registry`, imported on first use: a re-run answered from the cache needs no codemod."""
    from codemods import registry
    return registry


def _run_codemods_for(data: bytes, select: Callable[[str], bool], module_name: str, facts: Optional[RepoFacts],
                     use_prefilter: bool) -> List[Any]:
    """The codemods that must see a file: both prefilter stages, or every selected one without them."""
    present = prefilter.Present(data)
    if use_prefilter and not prefilter.coarse(data, present) and not prefilter.mentions_fact(data, facts, module_name):
        return []
    return prefilter.codemods_for(data, _registry().CODEMODS, select, module_name=module_name, facts=facts,
                                  enabled=use_prefilter, present=present)


class _LazyPositions(Mapping):
    """The positions of the tree's shared index, built on first use (a stage may never need them)."""

    def __init__(self, wrapper: MetadataWrapper):
        self.wrapper = wrapper
        self._map: Any = None

    def _resolved(self) -> Any:
        if self._map is None:
            self._map = ModuleIndex.of(self.wrapper.module).positions
        return self._map

    def __getitem__(self, node: Any) -> Any:
        return self._resolved()[node]

    def __contains__(self, node: Any) -> bool:
        return node in self._resolved()

    def __iter__(self) -> Iterator[Any]:
        return iter(self._resolved())

    def __len__(self) -> int:
        return len(self._resolved())


def _guard(e: BaseException) -> None:
    """Re-raise what must stop the run (Ctrl-C, exit); everything else becomes a per-file error."""
    if isinstance(e, (KeyboardInterrupt, SystemExit, GeneratorExit)):
        raise e


def _apply_codemods(text: str, module: cst.Module, codemods: List[Any], ctx: FileContext, track_lines: bool
                    ) -> Tuple[str, cst.Module, List[Finding], Optional[str]]:
    """Run `codemods` in order on `module` (parsed from `text`): (new text, new tree, findings, error).

    Metadata is resolved once per distinct tree: a stage that returns its module unchanged lets the
    next stage reuse the wrapper and its positions.
    """
    findings: List[Finding] = []
    maps: List[List[int]] = []
    current = text
    wrapper: Optional[MetadataWrapper] = None
    positions: Any = None
    suppressions: Optional[Suppressions] = None
    for cm in codemods:
        if wrapper is None or wrapper.module is not module:
            wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
            positions = _LazyPositions(wrapper)
        if suppressions is None:
            suppressions = Suppressions(current)
        ctx.begin_stage(positions)
        ctx.suppressions = suppressions
        published = selection.snapshot_facts(cm, ctx)
        try:
            new_module = cm.transform(wrapper, ctx)
        except BaseException as e:  # noqa: B036 - a codemod bug must not take the run down
            _guard(e)
            ctx.end_stage()
            return text, module, findings, f"internal error in codemod {cm.NAME}: {type(e).__name__}: {e}"
        stage = ctx.end_stage()
        if new_module is not module and selection.made_deselected_edit(stage, ctx.select):
            new_module, stage = module, selection.undo_stage(stage, ctx, published)
        stage = [f for f in stage if ctx.select(f.code)]
        for f in stage:
            if suppressions.covers_finding(f.line, f.code) and not f.fixed:
                f.ignored = True
            if track_lines:
                f.line = _compose(maps, f.line) if f.line else 0
        findings.extend(stage)
        if new_module is not module:
            ctx.changed_by.append(cm.NAME)
            new_code = ModuleIndex.of(new_module, base=module).code
            if new_code != current:
                if track_lines:
                    maps.append(_line_map(current, new_code))
                current = new_code
                suppressions = None
            module = new_module
    return current, module, findings, None


def rewrite_source(text: str, *, path: str = "<string>", module_name: str = "", options: Optional[Options] = None,
                   select: Optional[Callable[[str], bool]] = None, facts: Optional[RepoFacts] = None,
                   check_stable: bool = True, prefilter_enabled: bool = True) -> Result:
    """Rewrite one Python source text. Never raises for bad input: errors land in `Result.error`.

    Only the codemods the prefilter lets through see the file; a file none of them wants is not
    parsed at all. A changed text must parse (CPython's own parser decides) and must come out of a
    second rewrite unchanged (the safety gate). The second rewrite runs on the tree the first one
    produced, whose code is exactly the new text, and only with the codemods its own prefilter wants.
    """
    try:
        return _rewrite_parsed(text, path, module_name, options, select, facts, check_stable, prefilter_enabled)
    finally:
        ModuleIndex.forget_all()  # this file's trees are freed now, not at the next cyclic collection


def _rewrite_parsed(text: str, path: str, module_name: str, options: Optional[Options],
                    select: Optional[Callable[[str], bool]], facts: Optional[RepoFacts], check_stable: bool,
                    prefilter_enabled: bool) -> Result:
    select = select or Selection()
    data = text.encode("utf-8", "surrogatepass")
    codemods = _run_codemods_for(data, select, module_name, facts, prefilter_enabled)
    if not codemods:
        return Result(text, text)
    try:
        module = _parse(text)
    except BaseException as e:  # noqa: B036 - ParserSyntaxError, RecursionError, native panics
        _guard(e)
        return Result(text, text, error=_parse_error(e, text))
    ctx = FileContext(path, module_name, options, facts, select)
    current, new_module, findings, error = _apply_codemods(text, module, codemods, ctx, track_lines=check_stable)
    if error is not None:
        return Result(text, text, findings=findings, error=error)
    result = Result(text, current, findings, None, list(ctx.launch_notes), ctx.exported)
    if current != text:
        why = _python_parse_error(current)
        if why is not None:
            return Result(text, text, findings, f"internal error: the rewrite did not parse ({why}); "
                                                "file left unchanged")
        if check_stable and not _stable(current, new_module, path, module_name, options, select, facts,
                                        prefilter_enabled):
            return Result(text, text, findings,
                          "internal error: a second rewrite would change the output again; file left unchanged")
        back = _line_map(text, current)
        inv: Dict[int, int] = {}
        for new_line in range(1, len(back) - 1):
            inv.setdefault(back[new_line], new_line)
        for f in findings:
            f.new_line = inv.get(f.line, f.line)
    findings.sort(key=lambda f: (f.line, f.col, f.code))
    return result


def _stable(current: str, module: cst.Module, path: str, module_name: str, options: Optional[Options],
            select: Callable[[str], bool], facts: Optional[RepoFacts], prefilter_enabled: bool) -> bool:
    """The safety gate: a second rewrite of `current` changes nothing. `module` is the tree the first
    rewrite produced, whose code is `current`: the second rewrite runs on it without a parse."""
    data = current.encode("utf-8", "surrogatepass")
    codemods = [cm for cm in _run_codemods_for(data, select, module_name, facts, prefilter_enabled)
                if not getattr(cm, "REPORTS_ONLY", False)]  # a findings-only codemod cannot change the text
    if not codemods:
        return True
    ctx = FileContext(path, module_name, options, facts, select)
    text, _, _, error = _apply_codemods(current, module, codemods, ctx, track_lines=False)
    return error is not None or text == current


# -- whole runs --------------------------------------------------------------------------------


@dataclass
class FileResult:
    path: str
    kind: str
    old_text: str = ""
    new_text: str = ""
    findings: List[Finding] = field(default_factory=list)
    error: Optional[str] = None
    written: bool = False
    launch_notes: List[Dict[str, Any]] = field(default_factory=list)
    exported: Optional[RepoFacts] = None  # pass 1 only: the facts the file publishes
    source_digest: Optional[bytes] = None  # cache.digest of the bytes the result was made from

    @property
    def changed(self) -> bool:
        return self.error is None and self.new_text != self.old_text


@dataclass
class RunResult:
    files: List[FileResult] = field(default_factory=list)
    scanned: int = 0

    @property
    def errors(self) -> List[FileResult]:
        return [f for f in self.files if f.error]

    @property
    def changed(self) -> List[FileResult]:
        return [f for f in self.files if f.changed]

    def open_findings(self) -> List[Tuple[FileResult, Finding]]:
        return [(fr, f) for fr in self.files for f in fr.findings if not f.fixed and not f.ignored]

    def exit_code(self) -> int:
        if self.errors:
            return 2
        if self.changed or self.open_findings():
            return 1
        return 0


def _selection_for(path: str, root: str, config: RunConfig) -> Callable[[str], bool]:
    if not config.per_file_ignores:
        return config.select
    rel = os.path.relpath(path, root).replace(os.sep, "/")
    import fnmatch
    extra = [codes for pat, codes in config.per_file_ignores.items()
             if fnmatch.fnmatch(rel, pat) or fnmatch.fnmatch(os.path.basename(path), pat)
             or fnmatch.fnmatch(os.path.abspath(path).replace(os.sep, "/"), pat)]  # config globs are anchored
    if not extra:
        return config.select
    flat = [c for codes in extra for c in codes]
    base = config.select
    return lambda code: base(code) and not any(code.startswith(c) for c in flat)


def _read(d: discovery.Discovered) -> Source:
    data = read_bytes(d.path)
    if d.kind == discovery.PYTHON:
        return decode_python(d.path, data)
    return decode_text(d.path, data)


def _python_handler(src: Source, d: discovery.Discovered, config: RunConfig, facts: RepoFacts) -> FileResult:
    mod, is_pkg = discovery.module_name_for(d.path)
    select = _selection_for(d.path, d.root, config)
    shadow = apex_shadow.shadow_for(d.path, mod, src.data)  # a local apex.py this module's `apex` reaches
    res = rewrite_source(src.text, path=d.path, module_name=mod, options=config.options,
                         select=apex_shadow.without_apex_codemods(select) if shadow else select, facts=facts,
                         prefilter_enabled=config.prefilter)
    if shadow is not None:
        res.findings = apex_shadow.merged_findings(res.findings, shadow, d.path, src, res.new_text, select)
    return FileResult(d.path, d.kind, src.text, res.new_text if res.error is None else src.text,
                      res.findings, res.error, launch_notes=res.launch_notes, exported=res.exported)


def _other_handler(src: Source, d: discovery.Discovered, config: RunConfig, facts: RepoFacts) -> FileResult:
    if d.kind == discovery.NOTEBOOK:
        from .notebook import rewrite_notebook
        return rewrite_notebook(src, d, config, facts)
    from .launch_scripts import rewrite_launch_file
    return rewrite_launch_file(src, d, config, facts)


def process_file(d: discovery.Discovered, config: RunConfig, facts: RepoFacts) -> FileResult:
    """Read, rewrite and (when asked) write one file; every failure becomes `FileResult.error`."""
    try:
        src = _read(d)
    except SourceError as e:
        return FileResult(d.path, d.kind, error=str(e))
    fr = _rewrite_read(src, d, config, facts)
    if config.write and fr.changed:
        _write_result(src, fr)
    return fr


def _rewrite_read(src: Source, d: discovery.Discovered, config: RunConfig, facts: RepoFacts) -> FileResult:
    """The rewrite of a file already read and decoded (nothing is written)."""
    fr = _rewrite_decoded(src, d, config, facts)
    if config.cache_dir is not None:
        from .cache import digest
        fr.source_digest = digest(src.data)
    return fr


def _rewrite_decoded(src: Source, d: discovery.Discovered, config: RunConfig, facts: RepoFacts) -> FileResult:
    if d.kind != discovery.PYTHON and config.prefilter and not _registry().may_need_work(src.data) \
            and not _names_moved_script(src.data, facts):
        return FileResult(d.path, d.kind, src.text, src.text)
    try:
        if d.kind == discovery.PYTHON:
            return _python_handler(src, d, config, facts)
        return _other_handler(src, d, config, facts)
    except BaseException as e:  # noqa: B036 - keep the run going whatever one file does
        _guard(e)
        return FileResult(d.path, d.kind, src.text, src.text, error=f"internal error: {type(e).__name__}: {e}")


def _write_result(src: Source, fr: FileResult) -> None:
    """Write `fr.new_text` over the file `src` was read from; a failure becomes `fr.error`."""
    try:
        write_atomic(fr.path, src.encode(fr.new_text), src.data)
        fr.written = True
    except SourceError as e:
        fr.error = str(e)
        fr.new_text = fr.old_text
    except UnicodeEncodeError as e:
        fr.error = (f"the rewritten text cannot be encoded in the file's encoding ({src.encoding}): "
                    f"{e.reason}; not overwritten")
        fr.new_text = fr.old_text
    except OSError as e:
        fr.error = f"cannot write: {e.strerror or e}"
        fr.new_text = fr.old_text


def _write_later(d: discovery.Discovered, fr: FileResult) -> FileResult:
    """Write a result made earlier (pass 1's rewrite, or one from the cache) if the file still holds its text."""
    try:
        src = _read(d)
    except SourceError as e:
        fr.error, fr.new_text = str(e), fr.old_text
        return fr
    if src.text != fr.old_text:
        fr.error, fr.new_text = "file changed on disk while it was being processed; not overwritten", fr.old_text
        return fr
    _write_result(src, fr)
    return fr


def pass_one_file(d: discovery.Discovered, config: RunConfig,
                  facts: Optional[RepoFacts] = None) -> Tuple[RepoFacts, Optional[FileResult]]:
    """Pass 1 for one file: its rewrite without other files' facts, and the facts it publishes.

    `run` keeps the rewrite when the file names nothing another file published (pass 2 would make
    the same one) and sends the file to pass 2 otherwise. Nothing is written here.
    """
    try:
        src = _read(d)
    except SourceError as e:
        return RepoFacts(), FileResult(d.path, d.kind, error=str(e))
    fr = _rewrite_read(src, d, config, facts or RepoFacts())
    published = fr.exported or RepoFacts()
    return published, _slim(fr)


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
        return (_REWRITE if _registry().may_need_work(data) else _SKIP), None
    codemods, select = _registry().CODEMODS, _selection_for(d.path, d.root, config)
    present = prefilter.candidate(data, codemods, select)
    if present is None:
        return _SKIP, None
    wanted = prefilter.codemods_for(data, codemods, select, module_name=discovery.module_name_for(d.path)[0],
                                    present=present)
    if not wanted:
        return _SKIP, None
    # Every Python candidate goes to pass 1, not only those of fact-publishing codemods: a file's
    # pass-1 rewrite stands unless it names a fact another file published (`_still_valid`), so the
    # files that need no facts are not held back behind pass 1, and pass 1 and 2 do not wait on
    # each other.
    return _PASS_ONE, None


def _slim(fr: FileResult) -> FileResult:
    """Drop what the report does not need: the texts of a file that does not change (memory stays
    bounded on big trees) and the facts it published (pass 1 took them)."""
    if not fr.changed:
        fr.old_text = fr.new_text = ""
    fr.exported = None
    return fr


def _pass_one_task(task: Tuple[discovery.Discovered, RunConfig]) -> Tuple[RepoFacts, Optional[FileResult]]:
    try:
        return pass_one_file(*task)
    except BaseException as e:  # noqa: B036 - pass 1 is best effort
        _guard(e)
        return RepoFacts(), None


def _process_task(task: Tuple[discovery.Discovered, RunConfig, RepoFacts]) -> FileResult:
    d = task[0]
    try:
        return _slim(process_file(*task))
    except BaseException as e:  # noqa: B036
        _guard(e)
        return FileResult(d.path, d.kind, error=f"internal error: {type(e).__name__}: {e}")


def _pass_one_crashed(task: Tuple[discovery.Discovered, RunConfig]) -> Tuple[RepoFacts, Optional[FileResult]]:
    return RepoFacts(), None  # pass 2 tries the file again and reports it


def _process_crashed(task: Tuple[discovery.Discovered, RunConfig, RepoFacts]) -> FileResult:
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
    cache = _open_cache(config)
    with FilePool(config.jobs, initializer=_warm_worker) as pool:
        files = list(discovery.discover(paths, config.excludes))
        keys: List[Any] = [None] * len(files)
        kept = _KeptBytes()  # bytes of skipped and pass-1 files, for the fact checks after pass 1
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
            if cache and _cacheable(res[1], keys[i]):
                cache.put(keys[i], "pass1", res)
        told = _refuse_foreign_method_calls(files, indexed, pass_one, kept, config, facts)
        _refuse_bf16_regions_off_the_switch(files, indexed, pass_one, kept, config, facts, told)
        _refuse_helpers_of_unmigrated(files, indexed, pass_one, kept, config, facts, told)
        _hold_back_helpers(files, indexed, pass_one, kept, config, told)
        simulated = _refuse_held_callers(files, indexed, pass_one, kept, config, facts, told, cache, keys)
        for i in indexed:
            f, fr = pass_one[i]
            facts.merge(f)
            published[i] = f
            if fr is not None:
                ready[i] = fr
        _note_torchrun_scripts(files, screened, [pass_one[i][1] for i in indexed], facts)
        held = [i for i, fr in ready.items() if _waits_for_a_helper(fr)]
        if held:
            inside, outside = _native_facts(files, published, kept, held)
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
            ready = _still_valid(files, ready, published, facts, kept, index)
        if facts.dropped_imports:
            # folders the run walked whole need no second walk (excluded files may still import)
            _keep_reexported_imports(files, published, kept, facts, ready, [] if config.excludes else paths, pool)
        pass_two = "pass2:" + _facts_digest(facts) if cache else ""
        if simulated:
            final = _facts_digest(facts)
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
        processed = pool.map(_process_task, [(files[i], no_write, facts) for i in todo], _process_crashed,
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
                if cache and not config.write and _cacheable(fr, keys[i]):  # written results carry the write
                    cache.put(keys[i], pass_two, fr)
            if config.write and fr.changed:
                to_write.append((i, d, fr))
            fr.source_digest = None
            result.files.append(fr)
            if on_result:
                on_result(fr)
    if cache:
        cache.save()
    if to_write:
        from .write_groups import group_writes, write_in_groups
        write_in_groups(group_writes(to_write, files, published, facts), _write_later)
    return result


def _names_moved_script(data: bytes, facts: RepoFacts) -> bool:
    """A launch file naming a script whose mp.spawn the run moved to torchrun."""
    from .launch_torchrun import FACT, mentions_moved_script
    moved = facts.extra.get(FACT)
    return bool(moved) and mentions_moved_script(data, moved)


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
    _registry()


def _open_cache(config: RunConfig) -> Any:
    """The cache bucket of this run's settings, or None without a cache folder."""
    if config.cache_dir is None:
        return None
    from .cache import ResultCache
    return ResultCache(config.cache_dir, config.settings_key())


class _KeptBytes(Dict[int, bytes]):
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
                kept: _KeptBytes, pool: Any, bar: Any = None) -> List[Tuple[int, Optional[FileResult]]]:
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
    keys[i] = key = _cache_key(d, digest(data))
    data_of[i] = data
    return cache.get(key, "screen")


def _cache_key(d: discovery.Discovered, digest: bytes) -> Tuple[str, str, bytes]:
    """The cache key of a file with bytes of this digest: where it is, its module, its bytes."""
    module = discovery.module_name_for(d.path)[0] if d.kind == discovery.PYTHON else ""
    if module:
        module += apex_shadow.cache_marker(d.path, module)
    return f"{os.path.abspath(d.path)}\0{d.path}\0{d.root}", module, digest


def _kept_screen(screened: Tuple[int, Optional[FileResult]], d: discovery.Discovered, i: int,
                 data: Optional[bytes], kept: _KeptBytes) -> Tuple[int, Optional[FileResult]]:
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


def _cacheable(fr: Optional[FileResult], key: Any) -> bool:
    """A result worth keeping: made from the bytes the key names, and not a passing failure
    (a read error, a crashed worker, an internal error)."""
    if key is None or fr is None or fr.source_digest != key[2]:
        return False
    return not fr.error or fr.error.startswith(("syntax error", "cannot parse"))


def _facts_digest(facts: RepoFacts) -> str:
    from .cache import facts_digest
    return facts_digest(facts)


def _still_valid(files: Sequence[discovery.Discovered], early: Dict[int, FileResult],
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


def _keep_reexported_imports(files: Sequence[discovery.Discovered], published: Dict[int, RepoFacts],
                             data_of: Dict[int, bytes], facts: RepoFacts, ready: Dict[int, FileResult],
                             walked: Sequence[str], pool: Any) -> None:
    """The unused apex imports pass 1 removed that another file imports from their module
    (`pkg/__init__.py` re-exporting FusedAdam): recorded in `facts.reexports`, and their modules'
    pass-1 results dropped from `ready`, so pass 2 rewrites them again and keeps those imports."""
    from .reexports import find_importers, scan_task
    publishers: Dict[str, Set[str]] = {}
    for i, f in published.items():
        for key in f.dropped_imports:
            publishers.setdefault(key, set()).add(os.path.abspath(files[i].path))
    run_files = [(d.path, data_of.get(i)) for i, d in enumerate(files) if d.kind == discovery.PYTHON]
    mapper = (lambda tasks: pool.map(scan_task, tasks, scan_task, parallel=True)) if pool.jobs > 1 else None
    facts.reexports = find_importers(facts.dropped_imports, run_files, publishers, walked, mapper)
    for i, f in published.items():
        if any(key in facts.reexports for key in f.dropped_imports):
            ready.pop(i, None)


def _refuse_bf16_regions_off_the_switch(files: Sequence[discovery.Discovered], indexed: Sequence[int],
                                        pass_one: Dict[int, Tuple[RepoFacts, Optional[FileResult]]],
                                        data_of: "_KeptBytes", config: RunConfig, facts: RepoFacts,
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
    for j in indexed:
        if pass_one[j][0].extra.get(BF16_SWITCHED):
            continue
        data = data_of.get(j)
        if data is None:
            try:
                data = read_bytes(files[j].path)
            except SourceError:
                continue
        if b"scale_loss" in data:
            mine = RepoFacts(extra={BF16_SWITCHED: switched})
            if j in prior:  # what an earlier cross-module pass told this file still holds
                mine.merge(prior[j])
            prior[j] = mine
            pass_one[j] = pass_one_file(files[j], config, mine)
    facts.merge(told)


def _hold_back_helpers(files: Sequence[discovery.Discovered], indexed: Sequence[int],
                       pass_one: Dict[int, Tuple[RepoFacts, Optional[FileResult]]], data_of: "_KeptBytes",
                       config: RunConfig, prior: Dict[int, RepoFacts]) -> None:
    """Backward helpers whose callers would keep their amp code keep theirs (migrate/helper_groups.py)."""

    def rerun(i: int, told: RepoFacts) -> Tuple[RepoFacts, Optional[FileResult]]:
        if i in prior:  # what an earlier cross-module pass told this file still holds
            told.merge(prior[i])
        prior[i] = told
        return pass_one_file(files[i], config, told)

    from .helper_groups import hold_back

    bytes_of = _bytes_reader(files, data_of)
    python = [j for j, d in enumerate(files) if d.kind == discovery.PYTHON]
    hold_back(files, indexed, pass_one, bytes_of, python,
              lambda j, facts: process_file(files[j], dataclasses.replace(config, write=False), facts),
              rerun)


def _refuse_foreign_method_calls(files: Sequence[discovery.Discovered], indexed: Sequence[int],
                                 pass_one: Dict[int, Tuple[RepoFacts, Optional[FileResult]]],
                                 data_of: "_KeptBytes", config: RunConfig, facts: RepoFacts) -> Dict[int, RepoFacts]:
    """Pass 1 again, in this process, for the files whose methods got a scaler parameter that another
    file references, or whose module-level functions did and another file uses as a value
    (`migrate.method_refs`): told so, their amp migration refuses instead."""
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
    for i, found in foreign_value_refs(exporting, python, bytes_of, lambda j: files[j].path).items():
        told.setdefault(i, RepoFacts()).foreign_value_refs.update(found)
    for i, t in told.items():
        pass_one[i] = pass_one_file(files[i], config, t)
        facts.merge(t)
    return told


def _bytes_reader(files: Sequence[discovery.Discovered], data_of: "_KeptBytes") -> Callable[[int], Optional[bytes]]:
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


def _refuse_held_callers(files: Sequence[discovery.Discovered], indexed: Sequence[int],
                         pass_one: Dict[int, Tuple[RepoFacts, Optional[FileResult]]], data_of: "_KeptBytes",
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
    for _ in range(len(indexed)):
        run_facts = RepoFacts()
        for i in indexed:
            run_facts.merge(pass_one[i][0])
        for t in told.values():
            run_facts.merge(t)
        exporting = {i: pass_one[i][0] for i in indexed if pass_one[i][0].scaler_functions}
        texts: Dict[int, Optional[str]] = {}
        digest_now = _facts_digest(run_facts)

        def rewritten(j: int, run_facts: RepoFacts = run_facts, texts: Dict[int, Optional[str]] = texts,
                      digest_now: str = digest_now) -> Optional[str]:
            """The text pass 2 would write for file j with these facts (None: unchanged); pass 2 takes
            this rewrite (here, or from the cache next time) when its facts are the same."""
            if j not in texts:
                key = keys[j] if j < len(keys) else None
                fr = cache.get(key, "pass2:" + digest_now) if cache and key is not None else None
                if fr is None:
                    fr = pass_one_file(files[j], config, run_facts)[1]
                    if cache and _cacheable(fr, key):
                        cache.put(key, "pass2:" + digest_now, fr)
                if fr is not None:
                    simulated[j] = (digest_now, fr)
                texts[j] = fr.new_text if fr is not None and fr.changed else None
            return texts[j]

        again = []
        for i, by_key in held_calls(exporting, python, lambda j: files[j].path, bytes_of, rewritten).items():
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


def _refuse_helpers_of_unmigrated(files: Sequence[discovery.Discovered], indexed: Sequence[int],
                                  pass_one: Dict[int, Tuple[RepoFacts, Optional[FileResult]]],
                                  data_of: "_KeptBytes", config: RunConfig, facts: RepoFacts,
                                  prior: Dict[int, RepoFacts]) -> None:
    """Pass 1 again for the files whose functions got a scaler parameter that a module keeping its apex
    amp code calls (`codemods.amp.CALLERS_KEEP_AMP`): told so, their amp migration refuses too, since
    the cross-module migration is written whole or not at all (Swin's utils.save_checkpoint, main.py held)."""
    from codemods.amp import CALLERS_KEEP_AMP

    def settled(j: int) -> bool:  # left unmigrated for good, not waiting for pass 2's facts
        fr = pass_one[j][1]
        return fr is None or not (_waits_for_a_helper(fr) or checkpoint_facts.waits_for_helper(fr))

    keeping = {m for j in indexed if settled(j) for m in pass_one[j][0].unmigrated_amp}
    publishers = [i for i in indexed if pass_one[i][0].scaler_functions]
    if not keeping or not publishers:
        return
    callers = [(j, discovery.module_name_for(files[j].path)[0]) for j in indexed]
    callers = [(j, m) for j, m in callers if m in keeping]
    told: Dict[str, List[str]] = {}
    for i in publishers:
        own = RepoFacts(scaler_functions=dict(pass_one[i][0].scaler_functions))
        for j, module in callers:
            if j == i:
                continue
            data = data_of.get(j)
            if data is None:
                try:
                    data = read_bytes(files[j].path)
                except SourceError:
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
            if i in prior:  # what `_refuse_foreign_method_calls` told this file still holds
                mine.merge(prior[i])
            prior[i] = mine
            pass_one[i] = pass_one_file(files[i], config, mine)
    facts.merge(extra)


def _waits_for_a_helper(fr: FileResult) -> bool:
    """Whether a pass-1 result held an `amp.initialize` (or a backward) because no function of the run
    takes the scaler (A2A124): a helper already on torch.amp may be that function."""
    return any(f.code == "A2A124" for f in fr.findings)


def _native_facts(files: Sequence[discovery.Discovered], published: Dict[int, RepoFacts],
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
