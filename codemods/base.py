"""Shared vocabulary of every codemod: rules, findings, options and the per-file context.

A codemod maps a libcst module (plus repo facts) to a module and findings. It never does I/O.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Hashable, List, Optional, Tuple, TypeVar

import os
import re

import libcst as cst

from .records import (  # noqa: F401 - re-exported: the vocabulary every codemod imports from here
    FIX, INFO, RULES, SEVERITIES, WARNING, Finding, Options, RepoFacts, Rule, facts_key, module_root, rule,
)


T = TypeVar("T")
_FACTS_INDEXES: Dict[Tuple[str, Hashable], Any] = {}
_MAX_FACTS_INDEXES = 32
_LAST_TABLE: Dict[str, Tuple[Any, int, Any]] = {}  # kind -> (the table, its length, its index)


def facts_index(kind: str, table: Any, build: Callable[[Tuple[Hashable, ...]], T]) -> T:
    """`build(keys)` of one table of the run's facts (a dict or list; `keys`: its keys or items, in
    order), made once per `kind` and distinct keys and reused by every later file. Each pass-2 task
    gets its own copy of the facts, equal to the others', so the index is found by the keys' value;
    within a task, by the table itself while its length stays (tables of the facts only grow).
    `build` reads nothing but the keys: a file looks the values up in its own facts."""
    last = _LAST_TABLE.get(kind)
    if last is not None and last[0] is table and last[1] == len(table):
        return last[2]  # type: ignore[no-any-return]
    keys = tuple(table)
    found = _FACTS_INDEXES.get((kind, keys))
    if found is None:
        if len(_FACTS_INDEXES) >= _MAX_FACTS_INDEXES:
            _FACTS_INDEXES.clear()
        found = _FACTS_INDEXES[(kind, keys)] = build(keys)
    _LAST_TABLE[kind] = (table, len(keys), found)
    return found


def named_from(path: str, file: str) -> str:
    """`path` as a finding in `file` names it: relative to `file`'s folder, with `/` (never the machine's
    absolute path)."""
    return os.path.relpath(path, os.path.dirname(os.path.abspath(file))).replace(os.sep, "/")


class FileContext:
    """Per-file state a codemod reads (path, options, facts) and writes (findings, launch notes)."""

    def __init__(self, path: str = "<string>", module_name: str = "", options: Optional[Options] = None,
                 facts: Optional[RepoFacts] = None, select: Optional[Callable[[str], bool]] = None):
        self.path = path
        self.module_name = module_name
        self.options = options or Options()
        self.facts = facts or RepoFacts()
        self.findings: List[Finding] = []
        self.launch_notes: List[Dict[str, Any]] = []  # torchrun lines etc., for the report
        self.select = select or (lambda code: True)
        self.exported: RepoFacts = RepoFacts()  # facts this file contributes (pass 1)
        self._positions: Any = None
        self._stage_findings: List[Finding] = []
        self.suppressions: Any = None  # codemods.suppression.Suppressions of the current stage's text
        self.changed_by: List[str] = []  # NAMEs of the earlier stages that changed this file's tree

    def line_of(self, node: cst.CSTNode) -> int:
        pos = self._positions.get(node) if self._positions is not None else None
        return pos.start.line if pos is not None else 0

    def suppressed(self, node: cst.CSTNode, code: str) -> bool:
        """Whether an `# apex2amp: ignore` comment covers `node` for `code` (then leave it alone)."""
        if not self.suppressions:
            return False
        pos = self._positions.get(node) if self._positions is not None else None
        if pos is None:
            return False
        covered = self.suppressions.covers(pos.start.line, code) or self.suppressions.covers(pos.end.line, code)
        if covered and code in RULES:
            self._note_suppressed(node, code)
        return covered

    def _note_suppressed(self, node: cst.CSTNode, code: str) -> None:
        """Keep the site a comment suppressed as an ignored finding (`--show-ignored` lists it)."""
        line = self.line_of(node)
        if any(f.ignored and f.code == code and f.line == line for f in self._stage_findings):
            return
        self.report(node, code, f"{RULES[code].summary} (suppressed by `# apex2amp: ignore`)")
        self._stage_findings[-1].ignored = True

    def enabled(self, code: str) -> bool:
        return self.select(code)

    def report(self, node: Optional[cst.CSTNode], code: str, message: str, *, fixed: bool = False,
               severity: Optional[str] = None, at: Optional[Tuple[int, int]] = None) -> None:
        """Record a finding at `node` (a node of the module the current stage was given), or at the
        (line, column) `at` of that module's source (a line inside a docstring, a comment)."""
        line = col = 0
        if at is not None:
            line, col = at
        elif node is not None and self._positions is not None:
            pos = self._positions.get(node)
            if pos is not None:
                line, col = pos.start.line, pos.start.column + 1
        r = RULES.get(code)
        sev = severity or (r.severity if r else WARNING)
        f = Finding(code, message, line, col, sev, fixed)
        self._stage_findings.append(f)

    def begin_stage(self, positions: Any) -> None:
        self._positions = positions
        self._stage_findings = []

    def end_stage(self) -> List[Finding]:
        out, self._stage_findings = self._stage_findings, []
        return out


# A rule's before/after example. One file, or several: each starts at a line `# file: PATH` (a path
# relative to the project folder; `after` names only the files the run changes). The run options the
# example needs are the rule's `flags=`, and for every unsafe fix `--unsafe-fixes`, for every
# A2A8xx rule `--target fsdp2`. tests/test_rule_examples.py runs each example as written;
# docs/generate_rules.py shows the same options.
FILE_MARKER = re.compile(r"^# file: (\S+)$", re.M)


def example_files(text: str) -> Dict[str, str]:
    """The files of an example: {path: text} by its `# file: PATH` lines ({} when it has none)."""
    marks = list(FILE_MARKER.finditer(text))
    if not marks or text[:marks[0].start()].strip():
        return {}
    ends = [m.start() for m in marks[1:]] + [len(text)]
    return {m.group(1): text[m.end():end].strip("\n") + "\n" for m, end in zip(marks, ends)}


def example_flags(r: Rule) -> Tuple[str, ...]:
    """The command-line options a rule's example runs with (see FILE_MARKER)."""
    extra = (["--unsafe-fixes"] if r.unsafe and "--unsafe-fixes" not in r.flags else []) + \
        (["--target", "fsdp2"] if r.code.startswith("A2A8") and "--target" not in r.flags else [])
    return tuple(r.flags) + tuple(extra)


class Codemod:
    """Base class of one migration concern.

    Subclasses set NAME, DESCRIPTION, CODES (rule codes they may emit) and TOKENS (byte strings of
    which at least one occurs in every file the codemod can change or report on: the engine skips the
    codemod on a file without any, `migrate/prefilter.py`) and implement `transform`. WORDS are
    tokens that count only as a whole word (`amp`, not the `amp` of `clamp` or `example`).
    A codemod with PUBLISHES_FACTS records, while it transforms, the repo facts other files need in
    `ctx.exported`: the engine then runs it in pass 1.
    """

    NAME = "base"
    DESCRIPTION = ""
    CODES: Tuple[str, ...] = ()
    TOKENS: Tuple[bytes, ...] = ()
    WORDS: Tuple[bytes, ...] = ()
    REPORTS_ONLY = False  # True: transform always returns its module (the safety gate skips it)
    PUBLISHES_FACTS = False  # True: transform fills ctx.exported (pass 1 runs it first)

    def transform(self, wrapper: cst.MetadataWrapper, ctx: FileContext) -> cst.Module:
        """Return the new module; report findings through ctx.report."""
        raise NotImplementedError

