"""`check`'s findings on the migrated tree that a verification must report before running it.

Runs `apex2amp check --format json` (the public CLI, in a subprocess, without the cache) on the migrated
folder and keeps the findings whose codes say the migrated program is not yet right: A2A7xx (scaler
calls missing a required argument, a non-bool `enabled=`, a scaler state saved but never restored, ...)
and A2A118 (apex still used). Codes added later under A2A7 are picked up without a change here.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import List

VERIFY_CODE_PREFIXES = ("A2A7", "A2A118")


def wanted(code: str) -> bool:
    """A finding code that verify reports in its verdict."""
    return any(code.startswith(p) for p in VERIFY_CODE_PREFIXES)


def migrated_tree_findings(folder: str, timeout: float = 300.0) -> List[dict]:
    """{"path", "line", "col", "code", "severity", "message", "text"} for each finding verify reports."""
    cmd = [sys.executable, "-m", "migrate", "check", "--format", "json", "--no-cache", os.path.abspath(folder)]
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join([root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        data = json.loads(proc.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return []
    out = []
    for f in data.get("files", []):
        rel = os.path.relpath(f.get("path", ""), os.path.abspath(folder))
        for item in f.get("findings", []):
            if item.get("ignored") or not wanted(str(item.get("code", ""))):
                continue
            text = "%s:%s:%s: %s %s" % (rel, item.get("line"), item.get("col"), item["code"], item.get("message", ""))
            out.append({"path": rel, "line": item.get("line"), "col": item.get("col"), "code": item["code"],
                        "severity": item.get("severity"), "message": item.get("message", ""), "text": text})
    return out
