"""The unified diff of one file's rewrite, as `git apply` and `patch` read it (`--diff`, the report's pending diffs)."""
from __future__ import annotations

import difflib
import re
from typing import TYPE_CHECKING, List

from .formats import patch_path
from .linediff import shared_ends

if TYPE_CHECKING:
    from .results import FileResult

_CONTEXT = 3  # difflib's default: lines of context around each change
_HUNK = re.compile(r"@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@")
_LINES = re.compile(r"[^\n]*\n|[^\n]+")  # lines as patch tools count them: `\n` ends one, nothing else


def unified_diff(fr: FileResult) -> str:
    """The unified diff of one file's rewrite (`a/path` -> `b/path`).

    Lines end at `\n` only, as `git apply` and `patch` count them (`str.splitlines` would also end
    one at a form feed). difflib aligns only the lines between those both texts share at their start
    and end, less twice the context it shows (a rewrite changes a few lines of a long file), and the
    hunks' line numbers are moved back to the whole file's. Where a change slid to the edge of that
    window along repeated lines, so that its hunk would show less context than difflib's, the whole
    texts are diffed instead. The same diff as difflib's of the whole texts wherever no change can
    slide along repeated lines; an equally valid patch elsewhere."""
    a = _LINES.findall(fr.old_text)
    b = _LINES.findall(fr.new_text)
    name = patch_path(fr.path)
    head, tail = shared_ends(a, b)
    # the context, and as much again: where a change sits next to repeated lines (blank ones), difflib
    # may place it a few lines into the shared run, and its hunk then shows context from there
    lo, cut = max(0, head - 2 * _CONTEXT), max(0, tail - 2 * _CONTEXT)
    lines = _diff_lines(a[lo:len(a) - cut], b[lo:len(b) - cut], name)
    if (lo or cut) and not _full_context(lines, lo > 0, cut > 0):
        lo = 0
        lines = _diff_lines(a, b, name)
    out = []
    for ln in lines:
        if lo and ln.startswith("@@"):
            ln = _HUNK.sub(lambda m: f"@@ -{int(m.group(1)) + lo}{m.group(2) or ''} "
                                     f"+{int(m.group(3)) + lo}{m.group(4) or ''} @@", ln, count=1)
        out.append(ln if ln.endswith("\n") else ln + "\n\\ No newline at end of file\n")
    return "".join(out)


def _diff_lines(a: List[str], b: List[str], name: str) -> List[str]:
    return list(difflib.unified_diff(a, b, fromfile=f"a/{name}", tofile=f"b/{name}", n=_CONTEXT))


def _full_context(lines: List[str], first: bool, last: bool) -> bool:
    """Whether the first hunk opens (when `first`) and the last one closes (when `last`) with the
    full context: lines of a window's diff that slid to its edge do not."""
    hunks = [k for k, ln in enumerate(lines) if ln.startswith("@@")]
    if not hunks:
        return True
    if first and not all(ln.startswith(" ") for ln in lines[hunks[0] + 1:hunks[0] + 1 + _CONTEXT]):
        return False
    return not last or all(ln.startswith(" ") for ln in lines[-_CONTEXT:])
