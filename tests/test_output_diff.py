"""`output.unified_diff` aligns only the lines between the texts' shared ends: the same diff as
difflib's of the whole texts wherever lines do not repeat around a change, and always a patch
that turns the old text into the new one."""
from __future__ import annotations

import difflib
import glob
import os
import re
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from migrate import output

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


_LINES = re.compile(r"[^\n]*\n|[^\n]+")  # lines as git apply and patch count them


def _whole(a: str, b: str) -> str:
    out = []
    for ln in difflib.unified_diff(_LINES.findall(a), _LINES.findall(b), fromfile="a/f.py", tofile="b/f.py"):
        out.append(ln if ln.endswith("\n") else ln + "\n\\ No newline at end of file\n")
    return "".join(out)


def _diff(a: str, b: str) -> str:
    return output.unified_diff(SimpleNamespace(old_text=a, new_text=b, path="f.py"))


def _apply(a: str, patch: str) -> str:
    """The text `patch` makes of `a`, checking that its context and removed lines are `a`'s and
    that both sides' hunk line numbers agree with where the hunks fall."""
    old = _LINES.findall(a)
    out: list = []
    at = 0
    lines = patch.splitlines(True)
    i = 2
    while i < len(lines):
        m = re.match(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", lines[i])
        assert m, lines[i]
        start = int(m.group(1)) - (0 if m.group(2) == "0" else 1)
        out += old[at:start]
        at = start
        assert int(m.group(3)) - (0 if m.group(4) == "0" else 1) == len(out), lines[i]
        i += 1
        while i < len(lines) and not lines[i].startswith("@@"):
            ln = lines[i]
            if ln.startswith("\\"):  # "\ No newline at end of file": of the line before, if it is kept
                if lines[i - 1].startswith("+"):  # a context line is taken from `old` as it is
                    out[-1] = out[-1][:-1]
            elif ln[0] in " -":
                assert old[at].rstrip("\n") == ln[1:].rstrip("\n"), (ln, old[at])
                if ln[0] == " ":
                    out.append(old[at])
                at += 1
            else:
                out.append(ln[1:])
            i += 1
    return "".join(out + old[at:])


def _context_lines(patch: str) -> list:
    """Per hunk, (leading, trailing) context line counts."""
    out = []
    for hunk in re.split(r"(?m)^@@.*\n", patch)[1:]:
        body = [ln for ln in hunk.splitlines() if not ln.startswith("\\")]
        lead = next((k for k, ln in enumerate(body) if not ln.startswith(" ")), len(body))
        trail = next((k for k, ln in enumerate(reversed(body)) if not ln.startswith(" ")), len(body))
        out.append((lead, trail))
    return out


def _changed(patch: str) -> tuple:
    lines = [ln for ln in patch.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    return sum(ln[0] == "-" for ln in lines), sum(ln[0] == "+" for ln in lines)


def test_the_fixtures_rewrites_diff_into_patches_that_apply_and_change_what_difflib_changes():
    # where an added block starts with a line equal to the one before it (a blank line), either place
    # is a correct hunk; the patch must apply and remove/add as many lines as difflib's
    for before in sorted(glob.glob(os.path.join(ROOT, "fixtures", "*", "*.before.py"))):
        after = before.replace(".before.py", ".after.py")
        if os.path.exists(after):
            a, b = open(before, encoding="utf-8").read(), open(after, encoding="utf-8").read()
            patch = _diff(a, b)
            assert _apply(a, patch) == b, before
            assert _changed(patch) == _changed(_whole(a, b)), before


def test_hunks_far_down_a_long_file_carry_the_whole_files_line_numbers():
    a = "".join(f"line {k}\n" for k in range(1000))
    b = a.replace("line 500\n", "changed\n").replace("line 900\n", "")
    assert _diff(a, b) == _whole(a, b)
    assert "@@ -498,7 +498,7 @@" in _diff(a, b)


_LINES_STRATEGY = st.lists(st.sampled_from(["a\n", "b\n", "\n", "x = 1\n", "    pass\n", "c"]), max_size=40)
# an old text and a new one that reverses its middle and inserts a line there (repeated lines abound)
_EDITS = st.builds(lambda head, middle, tail: ("".join(head) + "".join(middle) + "".join(tail),
                                               "".join(head) + "".join(reversed(middle)) + "x\n" + "".join(tail)),
                   _LINES_STRATEGY, _LINES_STRATEGY, _LINES_STRATEGY)


@settings(max_examples=300, deadline=None)
@given(_EDITS)
def test_the_diff_is_a_patch_of_the_old_text_into_the_new(texts):
    a, b = texts
    if a == b:
        return
    assert _apply(a, _diff(a, b)) == b


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 10_000), unique=True, min_size=1, max_size=300), st.data())
def test_without_repeated_lines_it_is_difflibs_diff(numbers, data):
    a = "".join(f"{n}\n" for n in numbers)
    lines = a.splitlines(True)
    k = data.draw(st.integers(0, len(lines) - 1))
    b = "".join(lines[:k] + ["new\n"] + lines[k + data.draw(st.integers(0, 3)):])
    assert _diff(a, b) == _whole(a, b)


def test_a_change_that_slides_along_repeated_lines_keeps_its_context():
    """difflib may place an inserted `x` anywhere in a run of `x` lines; at the edge of the aligned
    window its hunk would lose its leading context, so the whole texts are diffed instead."""
    shared_head = "".join(f"p{k}\n" for k in range(10))
    shared_tail = "".join(f"s{k}\n" for k in range(10))
    a = shared_head + "x\n" * 10 + "y\n" + shared_tail
    b = shared_head + "x\n" * 11 + "y\n" + shared_tail
    assert _diff(a, b) == _whole(a, b)
    assert _context_lines(_diff(a, b)) == [(3, 3)]


def test_a_form_feed_is_no_line_break():
    """`str.splitlines` ends a line at a form feed; patch tools do not."""
    a = "import os\n\x0c\ndef f():\n    return 1\n"
    b = a.replace("return 1", "return 2")
    patch = _diff(a, b)
    assert "No newline" not in patch and "@@ -1,4 +1,4 @@" in patch
    assert _apply(a, patch) == b


@settings(max_examples=300, deadline=None)
@given(_EDITS)
def test_every_hunk_has_its_context(texts):
    """Three lines of context before and after each hunk, unless it reaches the file's start or end."""
    a, b = texts
    if a == b:
        return
    patch = _diff(a, b)
    ends = len(_LINES.findall(a))
    headers = re.finditer(r"(?m)^@@ -(\d+)(?:,(\d+))? ", patch)
    for (lead, trail), m in zip(_context_lines(patch), headers):
        start, length = int(m.group(1)), int(m.group(2) or 1)
        last = start + length - 1 if length else start  # an empty range names the line before it
        assert lead >= 3 or start <= 1
        assert trail >= 3 or last >= ends
