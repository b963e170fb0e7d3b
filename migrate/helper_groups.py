"""A backward helper and its callers migrate together or not at all (codemods/backward_helpers.py).

After pass 1 a module may publish backward helpers (`def backward(loss, optimizer, args)` holding
`amp.scale_loss`, stepped by its callers). Before the facts reach pass 2, each file of the run that names
such a helper is rewritten here, in this process, with the facts: when one keeps its amp code (an unfixed
A2A117/A2A118), or no file of the run calls the helper, the helper's module is told so and its pass 1 runs
again; it then keeps its amp code too (and publishes no scaler function), so nothing is half migrated.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Dict, List, Optional, Sequence, Set

from codemods.backward_helpers import HELD, PREFIX
from codemods.records import RepoFacts

KEPT_AMP = ("A2A117", "A2A118")


def _calls(data: bytes, key: str, fn: str) -> bool:
    """Whether `data` may call helper `fn` of module `key` (`root::pkg.mod`): `fn(` not after a dot, or
    `mod.fn(`; a method of the same name (`scaled_loss.backward()`) is not a call of the helper."""
    mod = key.rpartition("::")[2].rpartition(".")[2]
    name = re.escape(fn.encode())
    if re.search(rb"(?<![\w.])" + name + rb"\s*\(", data):
        return True
    return bool(mod) and re.search(rb"\b" + re.escape(mod.encode()) + rb"\s*\.\s*" + name + rb"\s*\(", data) is not None


def hold_back(files: Sequence[Any], indexed: Sequence[int], pass_one: Dict[int, Any],
              bytes_of: Callable[[int], Optional[bytes]], python: Sequence[int],
              rewrite: Callable[[int, RepoFacts], Any], rerun: Callable[[int, RepoFacts], Any]) -> None:
    """Re-run pass 1 of the helper modules whose callers would not migrate (see the module docstring)."""
    helpers: Dict[int, Dict[str, List[str]]] = {}
    for i in indexed:
        f = pass_one[i][0]
        found = {k[len(PREFIX):]: list(v) for k, v in f.extra.items() if k.startswith(PREFIX)}
        if found:
            helpers[i] = found
    if not helpers:
        return
    facts = RepoFacts()
    for i in indexed:
        facts.merge(pass_one[i][0])
    held: Set[int] = set()
    called: Set[int] = set()
    for j in python:
        if j in helpers:
            continue
        data = bytes_of(j)
        if data is None:
            continue
        names = {i for i, h in helpers.items() for key, fns in h.items() for fn in fns if _calls(data, key, fn)}
        if not names:
            continue
        fr = rewrite(j, facts)
        kept = fr is None or fr.error or any(f.code in KEPT_AMP and not f.fixed for f in fr.findings)
        called |= names
        if kept:
            held |= names
    held |= set(helpers) - called
    for i in held:
        told = RepoFacts()
        for key in helpers[i]:
            told.extra[HELD + key] = True
        pass_one[i] = rerun(i, told)
