"""Which originals a migration can only reach through unsafe fixes (A2A145 and any later ones).

An unsafe fix changes what the program computes by design (a clip moved to the accumulation boundary sees
the whole accumulated gradient once instead of clipping each partial sum), so bitwise-equal curves are not
expected even on the CPU simulation: `verify` compares such pairs with the fidelity tolerance.
"""
from __future__ import annotations

import functools
import os
from typing import List, Tuple

UNSAFE_CODES = ("A2A145",)
_TOKENS = (b"scale_loss",)  # what every unsafe-fix site of today holds


@functools.lru_cache(maxsize=32)
def unsafe_fix_sites(folder: str) -> Tuple[str, ...]:
    """`path:line CODE` of each unsafe fix the rewriter offers in the original `folder`."""
    from codemods.records import RULES
    from migrate.engine import rewrite_source
    out: List[str] = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(root, name)
            try:
                with open(path, "rb") as fh:
                    data = fh.read()
                if not any(t in data for t in _TOKENS):
                    continue
                text = data.decode("utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            res = rewrite_source(text, path=path)
            for f in res.findings:
                if f.code in UNSAFE_CODES and f.code in RULES:
                    out.append(f"{os.path.relpath(path, folder)}:{f.line} {f.code}")
    return tuple(out)
