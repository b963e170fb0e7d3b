"""The two-pass engine: prefilter, index (pass 1), rewrite (pass 2), safety gate, write.

`rewrite_source` is the pure core used by everything else: text in, new text and findings out.
`run` drives a whole tree: discovery, repo facts, per-file handlers by kind, atomic writes.
"""
from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from codemods.base import FIX, FileContext, Finding, Options, RepoFacts
from codemods.registry import CODEMODS, may_need_work
from codemods.suppression import Suppressions

from . import discovery
from .fileio import Source, SourceError, decode_python, decode_text, read_bytes, write_atomic


class Selection:
    """`--select/--ignore` in ruff's style: codes are matched by prefix; ignore wins on ties in length."""

    def __init__(self, select: Sequence[str] = (), ignore: Sequence[str] = ()):
        self.select = [s.strip().upper() for s in select if s.strip()]
        self.ignore = [s.strip().upper() for s in ignore if s.strip()]

    def __call__(self, code: str) -> bool:
        sel = max((len(s) for s in self.select if code.startswith(s) or s == "ALL"), default=-1) \
            if self.select else 0
        ign = max((len(s) for s in self.ignore if code.startswith(s) or s == "ALL"), default=-1)
        if sel < 0:
            return False
        return ign < sel or (ign < 0)


@dataclass
class Result:
    """Outcome of rewriting one source text."""

    old_text: str
    new_text: str
    findings: List[Finding] = field(default_factory=list)
    error: Optional[str] = None
    launch_notes: List[Dict[str, Any]] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.error is None and self.new_text != self.old_text


def _line_map(old: str, new: str) -> List[int]:
    """For each 1-based line of `new`, the 1-based line of `old` it comes from (or is nearest to)."""
    a, b = old.splitlines(), new.splitlines()
    out = [0] * (len(b) + 2)
    sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
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


def _parse_error(e: Exception) -> str:
    if isinstance(e, cst.ParserSyntaxError):
        msg = str(e).strip().splitlines()
        head = msg[0] if msg else "syntax error"
        return f"syntax error at line {e.raw_line}, column {e.raw_column}: {head}"
    return f"cannot parse: {e}"


def _stage_codemods(data: bytes, select: Callable[[str], bool]):
    for cm in CODEMODS:
        if not any(select(c) for c in cm.CODES):
            continue
        if cm.matches(data):
            yield cm


def analyze_source(text: str, *, path: str = "<string>", module_name: str = "", options: Optional[Options] = None,
                   select: Optional[Callable[[str], bool]] = None) -> RepoFacts:
    """Pass 1: the repo facts one file contributes (nothing for files no codemod wants)."""
    data = text.encode("utf-8", "surrogatepass")
    ctx = FileContext(path, module_name, options, None, select)
    if not may_need_work(data):
        return ctx.exported
    try:
        module = _parse(text)
    except Exception:
        return ctx.exported
    for cm in _stage_codemods(data, ctx.select):
        wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        ctx.begin_stage(wrapper.resolve(PositionProvider))
        try:
            cm.analyze(wrapper, ctx)
        except Exception:
            pass
        ctx.end_stage()
    return ctx.exported


def rewrite_source(text: str, *, path: str = "<string>", module_name: str = "", options: Optional[Options] = None,
                   select: Optional[Callable[[str], bool]] = None, facts: Optional[RepoFacts] = None,
                   check_stable: bool = True) -> Result:
    """Rewrite one Python source text. Never raises for bad input: errors land in `Result.error`."""
    select = select or Selection()
    data = text.encode("utf-8", "surrogatepass")
    if not may_need_work(data):
        return Result(text, text)
    try:
        module = _parse(text)
    except Exception as e:  # libcst raises ParserSyntaxError, sometimes others on odd input
        return Result(text, text, error=_parse_error(e))
    ctx = FileContext(path, module_name, options, facts, select)
    findings: List[Finding] = []
    maps: List[List[int]] = []
    current = text
    for cm in _stage_codemods(data, select):
        wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        ctx.begin_stage(wrapper.resolve(PositionProvider))
        ctx.suppressions = Suppressions(current)
        try:
            new_module = cm.transform(wrapper, ctx)
        except Exception as e:  # a codemod bug must not take the run down or write half a migration
            ctx.end_stage()
            return Result(text, text, findings=findings,
                          error=f"internal error in codemod {cm.NAME}: {type(e).__name__}: {e}")
        stage = ctx.end_stage()
        for f in stage:
            if ctx.suppressions.covers(f.line, f.code) and not f.fixed:
                f.ignored = True
            f.line = _compose(maps, f.line) if f.line else 0
        findings.extend(stage)
        if new_module is not module:
            new_code = new_module.code
            if new_code != current:
                maps.append(_line_map(current, new_code))
                current = new_code
            module = new_module
    result = Result(text, current, findings, None, list(ctx.launch_notes))
    if current != text:
        try:
            _parse(current)
        except Exception as e:
            return Result(text, text, findings, f"internal error: the rewrite did not parse ({_parse_error(e)}); "
                                                "file left unchanged")
        if check_stable:
            again = rewrite_source(current, path=path, module_name=module_name, options=options, select=select,
                                   facts=facts, check_stable=False)
            if again.error is None and again.new_text != current:
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


# -- whole runs --------------------------------------------------------------------------------


@dataclass
class RunConfig:
    options: Options = field(default_factory=Options)
    select: Selection = field(default_factory=Selection)
    excludes: Sequence[str] = ()
    write: bool = False
    jobs: int = 1
    per_file_ignores: Dict[str, List[str]] = field(default_factory=dict)


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
             if fnmatch.fnmatch(rel, pat) or fnmatch.fnmatch(os.path.basename(path), pat)]
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
    res = rewrite_source(src.text, path=d.path, module_name=mod, options=config.options,
                         select=_selection_for(d.path, d.root, config), facts=facts)
    return FileResult(d.path, d.kind, src.text, res.new_text if res.error is None else src.text,
                      res.findings, res.error, launch_notes=res.launch_notes)


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
    if d.kind != discovery.PYTHON and not may_need_work(src.data):
        return FileResult(d.path, d.kind, src.text, src.text)
    try:
        if d.kind == discovery.PYTHON:
            fr = _python_handler(src, d, config, facts)
        else:
            fr = _other_handler(src, d, config, facts)
    except Exception as e:  # keep the run going whatever one file does
        return FileResult(d.path, d.kind, src.text, src.text, error=f"internal error: {type(e).__name__}: {e}")
    if config.write and fr.changed:
        try:
            write_atomic(d.path, src.encode(fr.new_text), src.data)
            fr.written = True
        except SourceError as e:
            fr.error = str(e)
            fr.new_text = fr.old_text
        except OSError as e:
            fr.error = f"cannot write: {e.strerror or e}"
            fr.new_text = fr.old_text
    return fr


def index_file(d: discovery.Discovered, config: RunConfig) -> RepoFacts:
    """Pass 1 for one file: cheap prefilter first, libcst only where a codemod may apply."""
    if d.kind != discovery.PYTHON:
        return RepoFacts()
    try:
        data = read_bytes(d.path)
    except SourceError:
        return RepoFacts()
    if not may_need_work(data):
        return RepoFacts()
    try:
        src = decode_python(d.path, data)
    except SourceError:
        return RepoFacts()
    mod, _ = discovery.module_name_for(d.path)
    return analyze_source(src.text, path=d.path, module_name=mod, options=config.options,
                          select=_selection_for(d.path, d.root, config))


def run(paths: Sequence[str], config: RunConfig,
        on_result: Optional[Callable[[FileResult], None]] = None) -> RunResult:
    """Process every file under `paths`; results come back (and stream to `on_result`) in path order."""
    files = list(discovery.discover(paths, config.excludes))
    facts = RepoFacts()
    for d in files:
        facts.merge(index_file(d, config))
    result = RunResult(scanned=len(files))
    for d in files:
        fr = process_file(d, config, facts)
        result.files.append(fr)
        if on_result:
            on_result(fr)
    return result
