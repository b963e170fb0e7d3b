"""The progress bar through a real terminal (a pty): it moves in pass 1 and pass 2, with sane time
estimates, and is absent when stderr is not a terminal."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from test_cli_helpers import REPO, cli

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")


def _tree(root, candidates=12, plain=60):
    for i in range(candidates):
        shutil.copy(os.path.join(REPO, "fixtures", "demo", "train.py"), root / f"train_{i}.py")
    for i in range(plain):
        (root / f"plain_{i}.py").write_text(f"x = {i}\n")
    return candidates + plain


def _stderr_on_a_terminal(args, cwd) -> str:
    import pty
    master, slave = pty.openpty()
    env = dict(os.environ, PYTHONPATH=REPO)
    p = subprocess.Popen([sys.executable, "-m", "migrate", *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert p.wait(timeout=300) == 1
    return out.decode("utf-8", "replace")


def test_the_bar_moves_in_both_passes_on_a_terminal(tmp_path):
    n = _tree(tmp_path)
    shown = _stderr_on_a_terminal(["check", "--no-cache", "-j", "1", "."], tmp_path)
    frames = re.findall(r"apex2amp (screening|pass 1|pass 2)\s+\[[#-]*\]\s+(\d+)/(\d+)\s*([^\r\n\x1b]*)", shown)
    stages = {}
    for stage, pos, total, eta in frames:
        stages.setdefault(stage, []).append((int(pos), int(total), eta.strip()))
    assert {"pass 1", "pass 2"} <= set(stages), shown[-2000:]
    one = [p for p, _, _ in stages["pass 1"]]
    assert one[0] == 0 and one[-1] == 12 and len(set(one)) > 2  # moved through pass 1's candidates
    assert stages["pass 2"][-1][:2] == (n, n)
    for _, _, eta in stages["pass 1"] + stages["pass 2"]:
        assert "d " not in eta and (not eta or eta.startswith("00:")), eta  # no estimate of days, or hours


def test_no_bar_when_stderr_is_not_a_terminal(tmp_path):
    _tree(tmp_path)
    r = cli(["check", "--no-cache", "-j", "1", "."], cwd=tmp_path)
    assert r.returncode == 1 and "apex2amp pass" not in r.stderr and "apex2amp screening" not in r.stderr
