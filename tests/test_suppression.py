"""`# apex2amp: ignore[CODES]` end to end through the CLI, and the comment parser itself."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codemods.suppression import Suppressions

from test_cli_helpers import ECOSYSTEM, cli

CUDA_AMP = '''\
import torch
from torch.cuda.amp import GradScaler

keep_a = torch.cuda.amp.GradScaler()  # apex2amp: ignore[A2A151]
# apex2amp: ignore
keep_b = torch.cuda.amp.GradScaler(
    init_scale=1024)
keep_c = torch.cuda.amp.GradScaler(
    init_scale=2048,
)  # apex2amp: ignore[A2A1]
other_code = torch.cuda.amp.GradScaler()  # apex2amp: ignore[A2A4]
plain = torch.cuda.amp.GradScaler()
stored = torch.cuda.amp.autocast  # apex2amp: ignore[A2A153]
'''


def test_suppressed_sites_stay_and_others_are_rewritten(tmp_path):
    (tmp_path / "t.py").write_text(CUDA_AMP)
    r = cli(["rewrite", "t.py"], cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    new = (tmp_path / "t.py").read_text().splitlines()
    old = CUDA_AMP.splitlines()
    for i in (3, 5, 6, 7, 8, 9, 12):  # suppressed lines are byte-identical
        assert new[i] == old[i], (i, new[i])
    assert new[10] == 'other_code = torch.amp.GradScaler("cuda")  # apex2amp: ignore[A2A4]'
    assert new[11] == 'plain = torch.amp.GradScaler("cuda")'
    assert "(ignored)" not in r.stdout and "A2A153" not in r.stdout
    assert ", 4 ignored;" in r.stdout.splitlines()[-1]  # the three kept GradScalers and the stored autocast


def test_show_ignored_lists_suppressed_findings(tmp_path):
    (tmp_path / "t.py").write_text(CUDA_AMP)
    r = cli(["check", "--show-ignored", "t.py"], cwd=tmp_path)
    ignored = [ln for ln in r.stdout.splitlines() if ln.endswith("(ignored)")]
    assert [ln.split(" ")[:2] for ln in ignored] == [  # every suppressed site, not only the findings
        ["t.py:4:10:", "A2A151"], ["t.py:6:10:", "A2A151"], ["t.py:8:10:", "A2A151"], ["t.py:13:10:", "A2A153"]]
    doc = json.loads(cli(["check", "--format", "json", "--show-ignored", "t.py"], cwd=tmp_path).stdout)
    flags = {(x["code"], x["line"]): x["ignored"] for x in doc["files"][0]["findings"]}
    assert flags[("A2A153", 13)] is True
    assert doc["summary"]["ignored"] == 4
    hidden = json.loads(cli(["check", "--format", "json", "t.py"], cwd=tmp_path).stdout)
    assert not any(x["ignored"] for f in hidden["files"] for x in f["findings"])


def test_only_suppressions_left_exits_zero(tmp_path):
    (tmp_path / "t.py").write_text("import torch\nf = torch.cuda.amp.autocast  # apex2amp: ignore\n")
    r = cli(["check", "t.py"], cwd=tmp_path)
    assert r.returncode == 0, r.stdout


def test_suppressed_apex_amp_initialize_is_left_alone(tmp_path):
    with open(f"{ECOSYSTEM}/precommit/train_amp.py", encoding="utf-8") as fh:
        src = fh.read()
    line = '    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")'
    assert line in src
    (tmp_path / "t.py").write_text(src.replace(line, line + "  # apex2amp: ignore"))
    cli(["rewrite", "t.py"], cwd=tmp_path)
    assert line + "  # apex2amp: ignore" in (tmp_path / "t.py").read_text()


def test_suppressions_cover_whole_statements_only():
    text = (
        "a = f(  # apex2amp: ignore[A2A101, a2a2]\n"   # 1
        "    x,\n"                                      # 2
        "    y)\n"                                      # 3
        "# a plain comment\n"                           # 4
        "# apex2amp: ignore\n"                          # 5
        "# another comment\n"                           # 6
        "with g(\n"                                     # 7
        "        z):\n"                                 # 8
        "    body()\n"                                  # 9
        "s = '''# apex2amp: ignore'''\n"                # 10 (inside a string it still counts: textual)
        "t = 1\n"                                       # 11
    )
    s = Suppressions(text)
    assert all(s.covers(n, "A2A101") for n in (1, 2, 3))
    assert s.covers(3, "A2A201") and not s.covers(3, "A2A301")
    assert s.covers(2, "A2A2")  # a family query is covered by a comment naming one of its codes
    assert s.covers(7, "A2A999") and s.covers(8, "A2A401")
    assert not s.covers(9, "A2A101")
    assert not s.covers(4, "A2A101") and not s.covers(11, "A2A101")
    assert not Suppressions("x = 1\n")


def test_suppressions_fall_back_to_lines_when_tokenizing_fails():
    s = Suppressions("x = (  # apex2amp: ignore\n")
    assert s.covers(1, "A2A101")


def test_suppression_lines_count_only_python_line_breaks():
    """A form feed or a U+2028 inside a string is not a line break for Python or libcst; a comment
    below it still covers the statement under it."""
    from codemods.suppression import Suppressions
    text = "x = '\x0c\u2028\x1c'\n\x0c\n# apex2amp: ignore[A2A408]\ny = 1\nz = 2\n"
    sup = Suppressions(text)
    assert sup.covers(4, "A2A408") and not sup.covers(5, "A2A408") and not sup.covers(3, "A2A408")


def test_rewritten_lines_are_mapped_by_python_line_breaks():
    """`new_line` of a finding comes from this map: a form feed inside a line does not shift it."""
    from migrate.engine import _line_map
    back = _line_map("a = '\x0c'\nc = 1\n", "a = '\x0c'\nb = 0\nc = 1\n")
    assert back[1:4] == [1, 2, 2] and len(back) == 5


def _line_map_over_whole_texts(old, new):
    """The map as difflib aligns the two whole texts (what `_line_map` did before it trimmed the
    lines both texts share at their ends)."""
    import difflib
    from migrate.engine import physical_lines
    a, b = physical_lines(old), physical_lines(new)
    out = [0] * (len(b) + 2)
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        for k in range(j1, j2):
            out[k + 1] = i1 + (k - j1) + 1 if tag == "equal" else min(i1 + (k - j1), max(i2 - 1, i1)) + 1
    out[len(b) + 1] = len(a) + 1
    return out


@settings(max_examples=500, deadline=None)
@given(st.integers(min_value=0, max_value=30), st.lists(st.tuples(st.sampled_from("ids"), st.integers(0, 40)),
                                                         max_size=5))
def test_line_map_trims_the_shared_ends_and_aligns_as_difflib_does(n, edits):
    """Where the alignment is unambiguous (every line distinct), trimming the shared first and last
    lines gives difflib's own map; and the shared lines map to themselves."""
    from migrate.engine import _line_map
    old = [f"line {i}\n" for i in range(n)]
    new = list(old)
    for fresh, (op, at) in enumerate(edits):
        at = min(at, len(new))
        if op == "i":
            new.insert(at, f"new {fresh}\n")
        elif op == "d" and at < len(new):
            del new[at]
        elif at < len(new):
            new[at] = f"changed {fresh}\n"
    back = _line_map("".join(old), "".join(new))
    assert back == _line_map_over_whole_texts("".join(old), "".join(new))
    head = next((k for k, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
    assert back[1:head + 1] == list(range(1, head + 1))
