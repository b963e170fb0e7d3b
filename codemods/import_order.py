"""Where a new `import NAME` goes in an import block that isort / ruff's `I` rules keep sorted.

A block is read as isort's default profile writes it: groups separated by one blank line (future,
standard library, third party, first party, local), in each group the `import x` lines sorted by
module name and then the `from x import y` lines sorted. When the leading block reads like that,
`sorted_position` names where `import NAME` keeps it so: in its group by name, or as a new group
at its section's place. A block that does not read like that (unsorted, comments, several imports
on a line) gets None: the caller keeps its plain placement after the block.

Which names are first party is not known here (isort asks the file system): the first group of
non-standard-library absolute imports is taken for the third-party one.
"""
from __future__ import annotations

import sys
from typing import List, Optional, Sequence, Tuple

import libcst as cst

from .names import dotted_name

FUTURE, STDLIB, THIRD, LOCAL = 0, 1, 2, 4

_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) or frozenset(
    ("os", "sys", "re", "io", "json", "math", "time", "argparse", "logging", "random", "shutil", "subprocess",
     "typing", "collections", "functools", "itertools", "pathlib", "glob", "copy", "warnings", "datetime"))


def _line(stmt: cst.BaseStatement) -> Optional[Tuple[int, bool, str]]:
    """(section, is a from-import, sort key) of a one-import line, or None."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
        return None
    small = stmt.body[0]
    if isinstance(small, cst.Import):
        if len(small.names) != 1:
            return None
        name = dotted_name(small.names[0].name) or ""
        return section_of(name, 0), False, name.lower()
    if isinstance(small, cst.ImportFrom):
        name = dotted_name(small.module) if small.module is not None else ""
        level = len(small.relative)
        return section_of(name or "", level), True, "." * level + (name or "").lower()
    return None


def section_of(name: str, level: int = 0) -> int:
    top = name.partition(".")[0]
    if level:
        return LOCAL
    if top == "__future__":
        return FUTURE
    return STDLIB if top in _STDLIB else THIRD


def _blank_before(stmt: cst.BaseStatement) -> Optional[bool]:
    """Whether one blank line precedes `stmt` (False: none; None: comments or several blank lines)."""
    lines = stmt.leading_lines
    if not lines:
        return False
    if len(lines) == 1 and lines[0].comment is None:
        return True
    return None


def sorted_position(block: Sequence[cst.BaseStatement], name: str
                    ) -> Optional[Tuple[int, bool, Optional[bool]]]:
    """Where `import name` keeps the sorted `block` sorted: (index to insert at, whether the new line
    has a blank line before it, whether the statement then after it has one: None leaves it as it
    is), or None when `block` is not a sorted import block."""
    groups: List[List[int]] = []
    infos: List[Tuple[int, bool, str]] = []
    for i, stmt in enumerate(block):
        info = _line(stmt)
        blank = _blank_before(stmt) if i else False
        if info is None or blank is None:
            return None
        infos.append(info)
        if i == 0 or blank:
            groups.append([i])
        else:
            groups[-1].append(i)
    sections: List[int] = []
    for g in groups:
        kinds = {infos[i][0] for i in g}
        keys = [infos[i][1:] for i in g]
        if len(kinds) != 1 or keys != sorted(keys):
            return None
        sections.append(kinds.pop())
    if sections != sorted(set(sections)):
        return None
    want, key = section_of(name), (False, name.lower())
    for g, sec in zip(groups, sections):
        if sec == want:
            for i in g:
                if infos[i][1:] > key:
                    return (i, i > 0, False) if i == g[0] else (i, False, None)
            return g[-1] + 1, False, None
        if sec > want:  # a new group before this one
            return g[0], g[0] > 0, True
    return len(block), bool(block), None
