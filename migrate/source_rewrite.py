"""One Python source text in, its rewrite and findings out: parse, codemods in order, line maps, safety gate.

`rewrite_source` is the pure core every file kind goes through (notebook cells and launch scripts too).
"""
from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import libcst as cst
from libcst.metadata import MetadataWrapper

from codemods.base import FileContext, Finding, Options, RepoFacts
from codemods.index import ModuleIndex
from codemods.suppression import Suppressions, physical_lines

from . import prefilter, selection
from .linediff import shared_ends
from .settings import RunConfig, Selection


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


def parse(text: str) -> cst.Module:
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


def parse_error(e: Exception, text: Optional[str] = None) -> str:
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


def codemod_registry() -> Any:
    """`codemods.registry`, imported on first use: a re-run answered from the cache needs no codemod."""
    from codemods import registry
    return registry


def _run_codemods_for(data: bytes, select: Callable[[str], bool], module_name: str, facts: Optional[RepoFacts],
                     use_prefilter: bool) -> List[Any]:
    """The codemods that must see a file: both prefilter stages, or every selected one without them."""
    present = prefilter.Present(data)
    if use_prefilter and not prefilter.coarse(data, present) and not prefilter.mentions_fact(data, facts, module_name):
        return []
    return prefilter.codemods_for(data, codemod_registry().CODEMODS, select, module_name=module_name, facts=facts,
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


def guard(e: BaseException) -> None:
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
            guard(e)
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
        module = parse(text)
    except BaseException as e:  # noqa: B036 - ParserSyntaxError, RecursionError, native panics
        guard(e)
        return Result(text, text, error=parse_error(e, text))
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


def selection_for(path: str, root: str, config: RunConfig) -> Callable[[str], bool]:
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
