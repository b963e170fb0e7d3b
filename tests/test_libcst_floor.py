"""The goldens hold on the oldest libcst pyproject allows (libcst>=1.1): every fixture pair is run
again in a virtual environment with libcst==1.1.0 (made once, kept in pytest's cache). The test is
skipped where that libcst cannot be installed (no index reachable)."""
from __future__ import annotations

import os
import subprocess
import sys
import venv

import pytest

from test_cli_helpers import REPO

FLOOR = "libcst==1.1.0"


def _floor_python(cache_dir) -> str:
    python = os.path.join(str(cache_dir), "bin", "python")
    ready = os.path.join(str(cache_dir), "ready")
    if os.path.exists(ready):
        return python
    venv.EnvBuilder(with_pip=True, clear=True).create(str(cache_dir))
    done = subprocess.run([python, "-m", "pip", "install", "-q", FLOOR, "click", "pathspec", "pytest"],
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        pytest.skip(f"{FLOOR} could not be installed: {done.stderr[-500:]}")
    open(ready, "w").close()
    return python


def test_goldens_hold_on_the_oldest_supported_libcst(request, tmp_path):
    cache = getattr(request.config, "cache", None)  # absent under `-p no:cacheprovider`: build it per run
    where = cache.mkdir("libcst-1.1.0-venv") if cache is not None else tmp_path / "libcst-1.1.0-venv"
    python = _floor_python(where)
    version = subprocess.run([python, "-c", "import libcst; print(libcst.__file__)"], capture_output=True,
                             text=True, check=True).stdout
    assert "libcst-1.1.0-venv" in version  # the floor's libcst, not this environment's
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.path.join(REPO, "tests")]))
    env.pop("PYTEST_XDIST_WORKER", None)
    done = subprocess.run([python, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:xdist",
                           os.path.join(REPO, "tests", "test_golden.py")], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "failed" not in done.stdout
