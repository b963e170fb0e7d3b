"""Notebooks through the real CLI: code cells migrated, magics, outputs and JSON layout kept."""
import json
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, "fixtures", "notebooks")


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
    assert "[cell 3] A2A301" in proc.stdout
    again = _cli("rewrite", str(nb_path))
    assert "[cell 3] A2A301" not in again.stdout


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
    # a cell that does not parse makes every cell be rewritten on its own (the fallback path)
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
