"""apex amp handed to another module as an object (`Solver(model, apex=amp)` kept as `self.apex`):
every remaining amp call there gets A2A171; code stays byte-identical; look-alikes stay quiet."""
import os
import shutil
import subprocess
import sys

import pytest

from golden import check_case, collect

HERE = os.path.dirname(os.path.abspath(__file__))
REPRO = os.path.join(HERE, "..", "fixtures", "amp_object", "passed_as_object")


@pytest.mark.parametrize("case", collect(["amp_object"]), ids=lambda c: c.id)
def test_golden_amp_object(case):
    check_case(case)


def test_solver_sites_reported_across_modules(tmp_path):
    for name in ("train.py", "solver.py"):
        shutil.copy(os.path.join(REPRO, name), tmp_path / name)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    res = subprocess.run([sys.executable, "-m", "migrate", "check", str(tmp_path)], capture_output=True, text=True)
    assert res.returncode == 1, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert any("solver.py:10:" in ln and "A2A171" in ln and "self.apex.initialize" in ln for ln in lines), res.stdout
    assert any("solver.py:15:" in ln and "A2A171" in ln and "self.apex.scale_loss" in ln for ln in lines), res.stdout
    assert any("train.py:6:" in ln and "A2A118" in ln for ln in lines), res.stdout
    rw = subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(tmp_path)], capture_output=True, text=True)
    assert rw.returncode == 1, rw.stdout + rw.stderr
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_explain_amp_object():
    res = subprocess.run([sys.executable, "-m", "migrate", "explain", "A2A171"], capture_output=True, text=True)
    assert res.returncode == 0 and "opt_level" in res.stdout
