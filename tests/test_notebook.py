"""Notebooks through the real CLI: code cells migrated, magics, outputs and JSON layout kept."""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, "fixtures", "notebooks")


def _has_cell_finding(out: str, cell: int, code: str) -> bool:
    """Whether `out` holds a `path:cell N:line:col: CODE` line (ruff's notebook locations)."""
    return re.search(rf"^\S+:cell {cell}:\d+:\d+: {code} ", out, re.M) is not None


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "migrate", *args], capture_output=True, text=True, cwd=REPO)


def test_notebook_rewrite(tmp_path):
    nb_path = tmp_path / "train.ipynb"
    shutil.copy(os.path.join(FIXTURES, "train.before.ipynb"), nb_path)
    proc = _cli("rewrite", str(nb_path))
    assert proc.returncode == 1, proc.stderr
    with open(os.path.join(FIXTURES, "train.after.ipynb"), encoding="utf-8") as fh:
        assert nb_path.read_text(encoding="utf-8") == fh.read()
    # findings name the cell and the line in it
    assert _has_cell_finding(proc.stdout, 3, "A2A301")
    again = _cli("rewrite", str(nb_path))
    assert not _has_cell_finding(again.stdout, 3, "A2A301")


def test_notebook_json_findings_and_layout(tmp_path):
    nb_path = tmp_path / "nb.ipynb"
    shutil.copy(os.path.join(FIXTURES, "train.before.ipynb"), nb_path)
    proc = _cli("check", "--format", "json", str(nb_path))
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    text = json.dumps(data)
    assert '"cell": 3' in text and '"cell": 4' in text
    # original untouched by check
    with open(os.path.join(FIXTURES, "train.before.ipynb"), encoding="utf-8") as fh:
        assert nb_path.read_text(encoding="utf-8") == fh.read()


def test_notebook_without_apex_is_untouched(tmp_path):
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                     "source": ["%time x = 1\n", "print(x)"]}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    p = tmp_path / "plain.ipynb"
    raw = json.dumps(nb, indent=2)
    p.write_text(raw)
    proc = _cli("check", str(p))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert p.read_text() == raw


def _code_cell(source):
    return {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}


def _write_notebook(path, cells):
    """Write `cells` the way Jupyter does (indent 1, trailing newline); returns the text written."""
    raw = json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1) + "\n"
    path.write_text(raw, encoding="utf-8")
    return raw


def test_notebook_with_trailing_blank_lines_and_nothing_to_do_is_byte_identical(tmp_path):
    # the markdown mentions float16 so the file passes the byte prefilter and reaches the notebook code
    cells = [{"cell_type": "markdown", "metadata": {}, "source": ["Runs in float16 (FP16).\n", "\n"]},
             _code_cell(["import numpy as np\n", "x = np.ones(2)\n", "\n"]),
             _code_cell(["with open('f') as fh:\n", "    y = fh.read()\n", "        \n", "\n", "\n"]),
             _code_cell(["%time z = x + 1\n", "\n"]),
             _code_cell("print(x, y, z)\n\n")]
    p = tmp_path / "plain.ipynb"
    raw = _write_notebook(p, cells)
    proc = _cli("rewrite", "--no-cache", str(p))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 changed" in proc.stdout
    assert p.read_text(encoding="utf-8") == raw


@pytest.mark.parametrize("broken_cell", [False, True], ids=["joined", "per-cell"])
def test_notebook_changed_cell_keeps_trailing_blank_line_and_others_are_kept(tmp_path, broken_cell):
    # with a cell that does not parse, the other cells are joined and rewritten without it (the fallback path)
    cells = [_code_cell(["import torch\n", "from apex.normalization import FusedLayerNorm\n",
                         "model = FusedLayerNorm(16)\n", "\n"]),
             _code_cell(["print(model)\n", "\n", "\n"]),
             _code_cell("y = model(x)\n\n")]
    if broken_cell:
        cells.append(_code_cell(["def broken(:\n", "\n"]))
    p = tmp_path / "nb.ipynb"
    _write_notebook(p, cells)
    proc = _cli("rewrite", "--no-cache", str(p))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    expected = json.loads(json.dumps(cells))
    expected[0]["source"] = ["import torch\n", "model = torch.nn.LayerNorm(16)\n", "\n"]
    assert p.read_text(encoding="utf-8") == _write_notebook(tmp_path / "expected.ipynb", expected)


def test_notebook_cell_that_does_not_parse_keeps_names_across_the_other_cells(tmp_path):
    # the import (cell 0) and its use (cell 2) are rewritten together; the broken cell 1 is kept and reported
    cells = [_code_cell(["from apex.normalization import FusedLayerNorm\n"]),
             _code_cell(["def f(:\n", "    pass\n", "\n"]),
             _code_cell(["model = FusedLayerNorm(16)\n", "print(model)"])]
    p = tmp_path / "nb.ipynb"
    _write_notebook(p, cells)
    proc = _cli("rewrite", "--no-cache", str(p))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    expected = json.loads(json.dumps(cells))
    expected[0]["source"] = ["import torch\n"]
    expected[2]["source"] = ["model = torch.nn.LayerNorm(16)\n", "print(model)"]
    assert p.read_text(encoding="utf-8") == _write_notebook(tmp_path / "expected.ipynb", expected)
    assert _has_cell_finding(proc.stdout, 0, "A2A110") and _has_cell_finding(proc.stdout, 2, "A2A310")
    broken = [ln for ln in proc.stdout.splitlines() if ":cell 1:" in ln]
    assert len(broken) == 1 and "A2A118" in broken[0] and "does not parse" in broken[0], proc.stdout
    assert "syntax error at line 1" in broken[0] and broken[0].startswith(f"{os.path.relpath(p, REPO)}:cell 1:1:")
    # migrated: nothing left for the prefilter, so the broken cell is not parsed (like a .py file) again
    again = _cli("rewrite", "--no-cache", str(p))
    assert again.returncode == 0 and "0 changed" in again.stdout, again.stdout + again.stderr


def test_notebook_with_only_a_cell_that_does_not_parse_is_reported_and_kept(tmp_path):
    cells = [{"cell_type": "markdown", "metadata": {}, "source": ["Trains with apex amp.\n"]},
             _code_cell(["from apex import amp\n", "model, opt = amp.initialize(model, opt)\n", "def f(:\n"])]
    p = tmp_path / "nb.ipynb"
    raw = _write_notebook(p, cells)
    proc = _cli("rewrite", "--no-cache", str(p))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert p.read_text(encoding="utf-8") == raw
    found = [ln for ln in proc.stdout.splitlines() if "A2A" in ln]
    assert len(found) == 1 and re.match(r"\S+:cell 1:\d+:\d+: A2A118 ", found[0]) and "syntax error at line 3" in found[0], proc.stdout
    assert "0 changed" in proc.stdout and "0 error(s)" in proc.stdout


def test_notebook_is_kept_when_a_cell_that_does_not_parse_uses_a_removed_name(tmp_path):
    # cell 1 only parses after cell 0; on their own, cell 0's import looks unused and would be removed
    cells = [_code_cell(["from apex.normalization import FusedLayerNorm\n", "def g():\n", "    pass\n"]),
             _code_cell(["    model = FusedLayerNorm(16)\n"]),
             _code_cell(["def f(:\n"])]
    p = tmp_path / "nb.ipynb"
    raw = _write_notebook(p, cells)
    proc = _cli("rewrite", "--no-cache", str(p))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert p.read_text(encoding="utf-8") == raw
    assert "removes `FusedLayerNorm`, which cell 1 uses" in proc.stderr and "notebook left unchanged" in proc.stderr
    assert _has_cell_finding(proc.stdout, 1, "A2A118") and _has_cell_finding(proc.stdout, 2, "A2A118")


def _result(old, new, error=None):
    from migrate.engine import Result
    return Result(old, new, error=error)


def test_notebook_fallback_rewrites_nothing_when_the_parsing_cells_fail_joined():
    from migrate import notebook
    nb = {"cells": [_code_cell("from apex import amp\n"), _code_cell("def f(:\n"), _code_cell("amp.x()\n")]}
    seen = []

    def rewrite(text):
        seen.append(text)
        return _result(text, text, error="syntax error at line 4, column 0: boom")

    texts, findings, res, error = notebook._rewrite_parsable(nb, [0, 1, 2], rewrite, notebook._JoinFailed("x"))
    assert texts == {} and res is None
    assert error == "syntax error at cell 2, line 1, column 0: boom (in the joined code cells that parse); " \
                    "notebook left unchanged"
    assert [(f.code, f.cell) for f in findings] == [("A2A118", 1)]
    assert "def f(:" not in seen[0] and "apex" not in seen[0].replace("from apex import amp", "")


def test_notebook_fallback_rewrites_nothing_when_every_cell_parses():
    from migrate import notebook
    nb = {"cells": [_code_cell("x = 1\n"), _code_cell("y = 2\n")]}

    def rewrite(text):
        raise AssertionError("the same cells are not joined again")

    texts, findings, res, error = notebook._rewrite_parsable(
        nb, [0, 1], rewrite, notebook._JoinFailed("internal error: the rewrite moved a cell boundary"))
    assert (texts, findings, res) == ({}, [], None)
    assert error == "internal error: the rewrite moved a cell boundary (in the joined code cells); " \
                    "notebook left unchanged"


def test_notebook_placeholders_do_not_contain_apex():
    from migrate import notebook
    store = []
    masked = notebook.mask_magics("%time x = 1\n!ls", store)
    assert "apex" not in notebook.MARKER.format(3) and "apex" not in masked
    assert notebook.unmask_magics(masked, store) == "%time x = 1\n!ls"


def test_notebook_is_kept_when_a_magic_line_uses_a_removed_name(tmp_path):
    # the magic line is masked while the cells are rewritten: the import would look unused
    cells = [_code_cell(["from apex.normalization import FusedLayerNorm\n"]),
             _code_cell(["%time model = FusedLayerNorm(16)\n"])]
    p = tmp_path / "nb.ipynb"
    raw = _write_notebook(p, cells)
    proc = _cli("rewrite", "--no-cache", str(p))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert p.read_text(encoding="utf-8") == raw
    assert "removes `FusedLayerNorm`, which the magic line `%time model = FusedLayerNorm(16)` uses" in proc.stderr
