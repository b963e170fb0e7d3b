"""Shared helpers of the ecosystem tests (CLI subprocesses, fixture copies); holds no tests itself."""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from typing import Dict, Optional, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ECOSYSTEM = os.path.join(REPO, "fixtures", "ecosystem")
FINDING_RX = re.compile(r"^(?P<path>[^\s:][^:]*):(?:cell (?P<cell>\d+):)?(?P<line>\d+):(?P<col>\d+): "
                        r"(?P<code>A2A\d{3}) (?P<fix>\[\*\] )?(?P<msg>.+)$")
ANSI_RX = re.compile(r"\x1b\[[0-9;]*m")


def cli(args: Sequence[str], cwd: str, env: Optional[Dict[str, str]] = None,
        timeout: float = 120) -> subprocess.CompletedProcess:
    """Run `python -m migrate ARGS` (the apex2amp CLI) in `cwd` and capture text output."""
    full_env = dict(os.environ)
    full_env.pop("FORCE_COLOR", None)
    full_env["PYTHONPATH"] = REPO + os.pathsep + full_env.get("PYTHONPATH", "")
    if env:
        full_env.update(env)
    return subprocess.run([sys.executable, "-m", "migrate", *args], cwd=cwd, env=full_env, text=True,
                          capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)


def copy_fixture(name: str, dst_parent: str) -> str:
    """Copy fixtures/ecosystem/<name> to dst_parent/<name> and return the copy's path."""
    dst = os.path.join(str(dst_parent), name)
    shutil.copytree(os.path.join(ECOSYSTEM, name), dst)
    return dst


def tree_digest(root: str) -> Dict[str, str]:
    """sha256 of every file below root, by relative path (to prove nothing was written)."""
    out = {}
    for folder, _, files in os.walk(root):
        for f in files:
            p = os.path.join(folder, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def finding_lines(text: str):
    """The parsed `path:line:col: CODE message` lines of an output."""
    return [m.groupdict() for m in (FINDING_RX.match(ln) for ln in text.splitlines()) if m]
