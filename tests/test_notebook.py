"""Notebooks through the real CLI: code cells migrated, magics, outputs and JSON layout kept."""
import json
import os
import shutil
import subprocess
import sys

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
