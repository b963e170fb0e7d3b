"""The lines two versions of a text share at their start and end: what difflib need not align.

A rewrite changes a few lines of a long file; the line maps (`source_rewrite._line_map`) and the diffs
(`output.unified_diff`) hand difflib only the lines between these shared ends.
"""
from __future__ import annotations

from typing import Sequence, Tuple


def shared_ends(a: Sequence[str], b: Sequence[str]) -> Tuple[int, int]:
    """(how many lines `a` and `b` share at their start, how many more at their end); the two never
    overlap."""
    shortest = min(len(a), len(b))
    head = 0
    while head < shortest and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < shortest - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    return head, tail
