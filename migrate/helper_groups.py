"""A backward helper (or a setup helper, codemods/init_helpers.py) and its callers migrate together or not
at all (codemods/backward_helpers.py).

After pass 1 a module may publish backward helpers (`def backward(loss, optimizer, args)` holding
`amp.scale_loss`, stepped by its callers). Before the facts reach pass 2, each file of the run that names
such a helper is rewritten here, in this process, with the facts: when one keeps its amp code (an unfixed
A2A117/A2A118), or no file of the run calls the helper, the helper's module is told so and its pass 1 runs
again; it then keeps its amp code too (and publishes no scaler function), so nothing is half migrated.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from codemods.backward_helpers import HELD, PREFIX
from codemods.records import RepoFacts

from .name_search import NameSearch

KEPT_AMP = ("A2A117", "A2A118")


def _module_of(key: str) -> str:
    return key.rpartition("::")[2].rpartition(".")[2]


def keeps_amp(fr: Any) -> bool:
    """Whether a caller's rewrite (a FileResult, None when it has none) keeps its amp code."""
    return bool(fr is None or fr.error or any(f.code in KEPT_AMP and not f.fixed for f in fr.findings))


def _calls(data: bytes, mod: str, fn: str) -> bool:
    """Whether `data` may call helper `fn` of a module whose last name is `mod` (of its key
    `root::pkg.mod`): `fn(` not after a dot, or `mod.fn(`; a method of the same name
    (`scaled_loss.backward()`) is not a call of the helper."""
    name = re.escape(fn.encode())
    if re.search(rb"(?<![\w.])" + name + rb"\s*\(", data):
        return True
    return bool(mod) and re.search(rb"\b" + re.escape(mod.encode()) + rb"\s*\.\s*" + name + rb"\s*\(", data) is not None


def hold_back(files: Sequence[Any], indexed: Sequence[int], pass_one: Dict[int, Any],
              bytes_of: Callable[[int], Optional[bytes]], python: Sequence[int],
              keeps: Callable[[int, RepoFacts], bool], rerun: Callable[[int, RepoFacts], Any],
              prefix: str = PREFIX, held_key: str = HELD, confirm: str = "") -> None:
    """Re-run pass 1 of the helper modules whose callers would not migrate (see the module docstring);
    `keeps(j, facts)`: whether file j, rewritten as pass 2 would with `facts`, keeps its amp code
    (`keeps_amp` of the rewrite). `prefix` / `held_key`: the facts of the kind of helper (the backward
    helpers by default; codemods/init_helpers.py's setup helpers likewise). With `confirm`, a helper
    migrates only when told so (`confirm + key`, its callers simulated as told too): the helpers not
    held run pass 1 again told that."""
    helpers: Dict[int, Dict[str, List[str]]] = {}
    for i in indexed:
        f = pass_one[i][0]
        found = {k[len(prefix):]: list(v) for k, v in f.extra.items() if k.startswith(prefix)}
        if found:
            helpers[i] = found
    if not helpers:
        return
    facts = RepoFacts()
    for i in indexed:
        facts.merge(pass_one[i][0])
    if confirm:
        for h in helpers.values():
            for key in h:
                facts.extra[confirm + key] = True
    # what a caller's bytes are matched on, (module last name, helper name), for the many helpers
    # that share one (copies of a package), and the helper names to find in the bytes first
    spellings: Dict[str, Set[Tuple[str, str]]] = {}
    for h in helpers.values():
        for key, fns in h.items():
            for fn in fns:
                spellings.setdefault(fn, set()).add((_module_of(key), fn))
    search = NameSearch(fn.encode() for fn in spellings)
    held_by: Set[Tuple[str, str]] = set()
    called_by: Set[Tuple[str, str]] = set()
    for j in python:
        if j in helpers:
            continue
        data = bytes_of(j)
        if data is None:
            continue
        matched = {s for fn in search.present(data) for s in spellings[fn.decode()] if _calls(data, *s)}
        if not matched:
            continue
        kept = keeps(j, facts)
        called_by |= matched
        if kept:
            held_by |= matched

    def among(spelled: Set[Tuple[str, str]]) -> Set[int]:
        return {i for i, h in helpers.items() if any((_module_of(key), fn) in spelled for key, fns in h.items()
                                                      for fn in fns)}

    held = among(held_by)
    held |= set(helpers) - among(called_by)
    for i in sorted(set(helpers) | held if confirm else held):
        told = RepoFacts()
        for key in helpers[i]:
            told.extra[(held_key if i in held else confirm) + key] = True
        pass_one[i] = rerun(i, told)
