"""One file of a run, by kind: read, rewrite (Python, notebook or launch script), and write when asked.

`process_file` is pass 2's step for one file, `pass_one_file` pass 1's (nothing written); both never
raise for a file: every failure becomes `FileResult.error`.
"""
from __future__ import annotations

from typing import Optional, Tuple

from codemods.base import RepoFacts

from . import apex_shadow, discovery
from .fileio import Source, SourceError, decode_python, decode_text, read_bytes, write_atomic
from .results import FileResult
from .settings import RunConfig
from .source_rewrite import codemod_registry, guard, rewrite_source, selection_for


def read_source(d: discovery.Discovered) -> Source:
    data = read_bytes(d.path)
    if d.kind == discovery.PYTHON:
        return decode_python(d.path, data)
    return decode_text(d.path, data)


def _python_handler(src: Source, d: discovery.Discovered, config: RunConfig, facts: RepoFacts) -> FileResult:
    mod, is_pkg = discovery.module_name_for(d.path)
    select = selection_for(d.path, d.root, config)
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
        src = read_source(d)
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
    if d.kind != discovery.PYTHON and config.prefilter and not codemod_registry().may_need_work(src.data) \
            and not _names_moved_script(src.data, facts):
        return FileResult(d.path, d.kind, src.text, src.text)
    try:
        if d.kind == discovery.PYTHON:
            return _python_handler(src, d, config, facts)
        return _other_handler(src, d, config, facts)
    except BaseException as e:  # noqa: B036 - keep the run going whatever one file does
        guard(e)
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


def write_later(d: discovery.Discovered, fr: FileResult) -> FileResult:
    """Write a result made earlier (pass 1's rewrite, or one from the cache) if the file still holds its text."""
    try:
        src = read_source(d)
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
        src = read_source(d)
    except SourceError as e:
        return RepoFacts(), FileResult(d.path, d.kind, error=str(e))
    fr = _rewrite_read(src, d, config, facts or RepoFacts())
    published = fr.exported or RepoFacts()
    return published, slim(fr)


def slim(fr: FileResult) -> FileResult:
    """Drop what the report does not need: the texts of a file that does not change (memory stays
    bounded on big trees) and the facts it published (pass 1 took them)."""
    if not fr.changed:
        fr.old_text = fr.new_text = ""
    fr.exported = None
    return fr


def _names_moved_script(data: bytes, facts: RepoFacts) -> bool:
    """A launch file naming a script whose mp.spawn the run moved to torchrun."""
    from .launch_torchrun import FACT, mentions_moved_script
    moved = facts.extra.get(FACT)
    return bool(moved) and mentions_moved_script(data, moved)
