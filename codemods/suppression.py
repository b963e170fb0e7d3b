"""`# apex2amp: ignore` and `# apex2amp: ignore[CODE,...]` comments.

A trailing comment covers its own line; a comment alone on a line covers the next code line (the
first line of a multi-line statement). Codes match by prefix, like `--ignore`.
"""
from __future__ import annotations

import re
from typing import Dict, FrozenSet, List, Optional, Tuple

_RX = re.compile(r"#\s*apex2amp:\s*ignore(?:\[([A-Za-z0-9_,\s]*)\])?", re.I)
ALL: FrozenSet[str] = frozenset({"*"})


class Suppressions:
    """The suppression comments of one source text, by 1-based line."""

    def __init__(self, text: str):
        self.lines: Dict[int, FrozenSet[str]] = {}
        self.comment_lines: List[Tuple[int, FrozenSet[str]]] = []
        if "apex2amp" not in text:
            return
        pending: Optional[FrozenSet[str]] = None
        for i, line in enumerate(text.splitlines(), start=1):
            m = _RX.search(line)
            stripped = line.strip()
            codes: Optional[FrozenSet[str]] = None
            if m:
                codes = ALL if m.group(1) is None else frozenset(
                    c.strip().upper() for c in m.group(1).split(",") if c.strip())
                self.comment_lines.append((i, codes))
            if m and stripped.startswith("#"):
                pending = codes if pending is None else pending | codes
                continue
            if not stripped:
                continue
            merged = codes
            if pending is not None:
                merged = pending if merged is None else merged | pending
                pending = None
            if merged is not None:
                self.lines[i] = merged

    def covers(self, line: int, code: str) -> bool:
        codes = self.lines.get(line)
        if codes is None:
            return False
        return codes is ALL or "*" in codes or any(code.upper().startswith(c) for c in codes)

    def __bool__(self) -> bool:
        return bool(self.lines)
