"""`# apex2amp: ignore[CODES]` end to end through the CLI, and the comment parser itself."""
from __future__ import annotations

import json

import pytest

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


FORM_FEED = """import torch
from apex import amp

NOTE = 'a\x0cb'


def train(model, optimizer, loader):
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()
    model = model.half()
"""


def test_rewritten_lines_are_mapped_by_python_line_breaks():
    """A finding's `new_line` is its line in the rewritten text, counted by Python's line breaks: the
    form feed inside a string is no line break, so it shifts nothing."""
    from migrate import rewrite_source
    res = rewrite_source(FORM_FEED, path="t.py")
    assert res.error is None and res.changed
    new_lines = res.new_text.split("\n")
    hazard = next(f for f in res.findings if f.code == "A2A604")
    assert FORM_FEED.split("\n")[hazard.line - 1] == new_lines[hazard.new_line - 1] == "    model = model.half()"
    step = next(f for f in res.findings if f.code == "A2A103")
    assert new_lines[step.new_line - 1] == "        scaler.step(optimizer)"
