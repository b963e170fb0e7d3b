"""Ctrl-C (SIGINT) or SIGTERM during `rewrite` never leaves a cross-file migration half written: the
files that depend on each other (here: a helper that now takes `scaler` and the caller that passes it)
are written together or not at all, the other files are skipped, the written ones are listed, and the
run exits 130. The signal is sent from outside to a real `apex2amp rewrite` subprocess, between two
writes (the test-only pause of migrate/write_groups.py)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from test_cli_helpers import REPO

FIXTURE = os.path.join(REPO, "fixtures", "interrupt_groups")
GROUP = ("engine.py", "main.py")  # the helper and its caller: one group
ALONE = ("zz_eval.py",)  # shares nothing with them


def _texts(root):
    return {n: (root / n).read_text(encoding="utf-8") for n in GROUP + ALONE}


def _start(root, pause: float) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
               APEX2AMP_TEST_WRITE_PAUSE=str(pause))
    return subprocess.Popen([sys.executable, "-m", "migrate", "rewrite", "--no-cache", "-j", "1", "."], cwd=str(root),
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)


def _wait_for_first_write(root, old, proc, timeout=60.0) -> int:
    """How many files are written when the test first sees one written."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        changed = sum((root / n).read_text(encoding="utf-8") != old[n] for n in old)
        if changed:
            return changed
        if proc.poll() is not None:
            pytest.fail("the run ended before it wrote anything: " + proc.communicate()[1])
        time.sleep(0.02)
    proc.kill()
    pytest.fail("no file was written in time")


def _interrupt_after_first_write(tmp_path, signum):
    """Send `signum` while the run pauses after its first write. Under load the test may see that
    write only after the pause (then the signal would land after the group, or after the run): such a
    try is dropped and the run tried again with a longer pause, so the test does not depend on timing."""
    for attempt, pause in enumerate((1.5, 4.0, 10.0)):
        root = tmp_path / f"repo{attempt}"
        shutil.copytree(FIXTURE, root)
        (root / ".git").mkdir()
        old = _texts(root)
        proc = _start(root, pause=pause)
        if _wait_for_first_write(root, old, proc) == 1:  # still in the pause after the first write
            proc.send_signal(signum)
            return root, old, proc
        proc.kill()
        proc.communicate()
    pytest.fail("the test never saw the run between its first and second write")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_between_writes_of_a_group_finishes_the_group_and_skips_the_rest(tmp_path, signum):
    root, old, proc = _interrupt_after_first_write(tmp_path, signum)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    new = _texts(root)
    changed = [n for n in GROUP if new[n] != old[n]]
    assert changed == list(GROUP), (changed, err)  # the group that had started is whole
    assert "def train_one_epoch(model, loader, optimizer, scaler):" in new["engine.py"]
    assert "train_one_epoch(model, loader, optimizer, scaler=scaler)" in new["main.py"]
    assert all(new[n] == old[n] for n in ALONE), err  # the next group never started
    assert "rewrote engine.py" in err and "rewrote main.py" in err and "rewrote zz_eval.py" not in err
    assert "interrupted: 2 file(s) written" in err and "1 left as they were" in err


def test_uninterrupted_run_writes_every_group(tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(FIXTURE, root)
    (root / ".git").mkdir()
    old = _texts(root)
    proc = _start(root, pause=0)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, out + err
    assert all(t != old[n] for n, t in _texts(root).items())


def test_interrupt_while_reporting_exits_130(tmp_path):
    """Ctrl-C while the diff is being printed (the run is over, stdout is full) exits 130 with a line that
    says the written files are complete, not click's "Aborted!" and exit 1."""
    if not os.path.exists("/proc/self/wchan"):
        pytest.skip("needs /proc to see the process blocked on its output pipe")
    src = open(os.path.join(REPO, "fixtures", "demo", "train.py")).read()
    for i in range(60):
        (tmp_path / f"train_{i}.py").write_text(src)
    env = dict(os.environ, NO_COLOR="1", PYTHONPATH=REPO)
    p = subprocess.Popen([sys.executable, "-m", "apex2amp", "rewrite", "--diff", "--no-cache", "-j", "1", "."],
                         cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    deadline = time.time() + 120
    while time.time() < deadline:  # blocked writing the diff: the pipe is full and nobody reads it
        with open(f"/proc/{p.pid}/wchan") as f:
            if "pipe" in f.read():
                break
        time.sleep(0.05)
    else:
        p.kill()
        pytest.fail("the run never blocked on its output")
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err.decode()
    assert b"interrupted while reporting" in err
