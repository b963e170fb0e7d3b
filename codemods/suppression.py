"""`# apex2amp: ignore` and `# apex2amp: ignore[CODE,...]` comments.

A comment covers the whole statement line it sits on: a trailing comment on any physical line of a
multi-line statement (a call spread over lines) covers every line of that statement, and a comment alone
on a line covers the next statement the same way. Only the header line of a compound statement (`with`,
`for`, `def`, ...) is covered, not its body. Codes match by prefix, like `--ignore`; `ignore` without a
list covers every code.
"""
from __future__ import annotations

import io
import re
import tokenize
from typing import Dict, FrozenSet, List, Optional, Tuple

_RX = re.compile(r"#\s*apex2amp:\s*ignore(?:\[([A-Za-z0-9_,\s]*)\])?", re.I)
ALL: FrozenSet[str] = frozenset({"*"})
# "apex is still used here" (A2A118): at a line a suppression comment keeps as it is, it is that
# comment's consequence, suppressed with it (a pre-commit hook goes green once each kept site is marked)
CONSEQUENCES: FrozenSet[str] = frozenset({"A2A118"})


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def physical_lines(text: str) -> List[str]:
    """`text.splitlines()`, broken only where Python and libcst count a new line: not at the form
    feeds, vertical tabs and Unicode separators `str.splitlines` also breaks at."""
    lines = _LINE_BREAK.split(text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _codes_of(match: "re.Match[str]") -> FrozenSet[str]:
    if match.group(1) is None:
        return ALL
    return frozenset(c.strip().upper() for c in match.group(1).split(",") if c.strip())


def _scan(text: str) -> Optional[Tuple[List[Tuple[int, int]], Dict[int, str]]]:
    """(first, last) physical lines of every logical line, and the comment of each line, from the
    tokenizer (None if it fails): text inside a string is no comment."""
    spans: List[Tuple[int, int]] = []
    comments: Dict[int, str] = {}
    start: Optional[int] = None
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                comments[tok.start[0]] = tok.string
                continue
            if tok.type in (tokenize.NL, tokenize.INDENT, tokenize.DEDENT,
                            tokenize.ENCODING, tokenize.ENDMARKER):
                continue
            if tok.type == tokenize.NEWLINE:
                if start is not None:
                    spans.append((start, tok.start[0]))
                start = None
                continue
            if start is None:
                start = tok.start[0]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    return spans, comments


class Suppressions:
    """The suppression comments of one source text, by 1-based line."""

    def __init__(self, text: str):
        self.lines: Dict[int, FrozenSet[str]] = {}
        self.comment_lines: List[Tuple[int, FrozenSet[str]]] = []
        if "apex2amp" not in text:
            return
        per_line: Dict[int, FrozenSet[str]] = {}
        pending: Optional[FrozenSet[str]] = None
        scanned = _scan(text)
        comments = scanned[1] if scanned is not None else None
        for i, line in enumerate(physical_lines(text), start=1):
            # without tokens (a file that does not tokenize) the line itself is searched
            m = _RX.search(line if comments is None else comments.get(i, ""))
            stripped = line.strip()
            codes: Optional[FrozenSet[str]] = None
            if m:
                codes = _codes_of(m)
                self.comment_lines.append((i, codes))
            if m and stripped.startswith("#"):
                pending = codes if pending is None else pending | codes
                continue
            if not stripped:
                continue
            if stripped.startswith("#"):
                continue  # other comments between the suppression and its statement
            merged = codes
            if pending is not None:
                merged = pending if merged is None else merged | pending
                pending = None
            if merged is not None:
                per_line[i] = merged
        if not per_line:
            return
        if scanned is None:
            self.lines = per_line
            return
        spans = scanned[0]
        self.lines = dict(per_line)
        for first, last in spans:
            found = [per_line[n] for n in range(first, last + 1) if n in per_line]
            if not found:
                continue
            union = ALL if any(c is ALL or "*" in c for c in found) else frozenset().union(*found)
            for n in range(first, last + 1):
                self.lines[n] = union

    def covers(self, line: int, code: str) -> bool:
        """Whether a comment covers `code` at `line`. `code` may be a family prefix (`A2A2`): then a
        comment naming any code of that family covers it (suppressing more is the safe side)."""
        codes = self.lines.get(line)
        if codes is None:
            return False
        if codes is ALL or "*" in codes:
            return True
        code = code.upper()
        return any(code.startswith(c) or c.startswith(code) for c in codes)

    def covers_finding(self, line: int, code: str) -> bool:
        """Whether a finding of `code` at `line` is suppressed: a comment covers its code, or the finding
        only says that apex stays where a comment keeps it (CONSEQUENCES, whatever codes the comment names)."""
        return self.covers(line, code) or (code in CONSEQUENCES and line in self.lines)

    def __bool__(self) -> bool:
        return bool(self.lines)
