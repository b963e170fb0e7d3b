"""Which migrations do not compute bit for bit what the original did, so `verify` needs the fidelity tolerance.

An unsafe fix (A2A145 and any later ones) changes what the program computes by design: a clip moved to the
accumulation boundary sees the whole accumulated gradient once instead of clipping each partial sum. The
original is rewritten with unsafe fixes on to find where they are offered; a migrated file that is exactly
what the default (safe) rewrite makes of its original took none of them.

A clip kept on every micro-batch with its threshold times the scale (A2A148) clips as apex did, but torch
adds 1e-6 to the norm in the clip coefficient, and on scaled gradients that 1e-6 weighs 1/scale as much: the
coefficient differs by about 1e-6 / norm, which fp16 training carries over the steps.
"""
from __future__ import annotations

import functools
import os
from typing import List, Tuple

UNSAFE_CODES = ("A2A145",)
SCALED_CLIP_CODES = ("A2A148",)
_TOKENS = ("scale_loss",)  # what every such site of today holds


def _read(path: str):
    try:
        with open(path, "rb") as fh:
            return fh.read().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


@functools.lru_cache(maxsize=32)
def _sites(folder: str, migrated: str) -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
    from codemods.records import RULES, Options
    from migrate.engine import rewrite_source
    unsafe: List[str] = []
    scaled: List[str] = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(root, name)
            text = _read(path)
            if text is None or not any(t in text for t in _TOKENS):
                continue
            rel = os.path.relpath(path, folder)
            safe = rewrite_source(text, path=path)
            scaled.extend(f"{rel}:{f.line} {f.code}" for f in safe.findings if f.code in SCALED_CLIP_CODES)
            res = rewrite_source(text, path=path, options=Options(unsafe_fixes=True))
            sites = [f"{rel}:{f.line} {f.code}" for f in res.findings if f.code in UNSAFE_CODES and f.code in RULES]
            after = _read(os.path.join(migrated, rel)) if migrated else None
            if sites and not (after is not None and safe.new_text == after):
                unsafe.extend(sites)
    return tuple(unsafe), tuple(scaled)


def unsafe_fix_sites(folder: str, migrated: str = "") -> Tuple[str, ...]:
    """`path:line CODE` of each unsafe fix offered in the original `folder` whose file in `migrated` (when
    given) is not what the default rewrite makes of it."""
    return _sites(folder, migrated)[0]


def scaled_clip_sites(folder: str) -> Tuple[str, ...]:
    """`path:line CODE` of each clip the default rewrite of `folder` keeps with a scaled threshold (A2A148)."""
    return _sites(folder, "")[1]
