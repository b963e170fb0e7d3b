"""Indexes of the published amp facts, built once per run's facts: each file looks up only its own names."""
from __future__ import annotations

from typing import Dict, Hashable, List, Tuple

from .base import facts_index


class ScalerModules:
    """The keys of `RepoFacts.scaler_functions` (`root::module`), grouped by import root and by module name."""

    def __init__(self, keys: Tuple[Hashable, ...]):
        self.rank: Dict[str, int] = {}  # module name -> its place in the order names first appear
        self.position: Dict[str, int] = {}  # key -> its place in the facts
        self.by_root: Dict[str, List[Tuple[str, str]]] = {}  # root -> (name, key), in facts order
        counts: Dict[str, int] = {}
        first: Dict[str, str] = {}
        for i, key in enumerate(keys):
            root, _, name = str(key).rpartition("::")
            self.rank.setdefault(name, len(self.rank))
            self.position[str(key)] = i
            self.by_root.setdefault(root, []).append((name, str(key)))
            counts[name] = counts.get(name, 0) + 1
            first.setdefault(name, str(key))
        # names only one module of the run has: visible from every root
        self.singles: List[Tuple[str, str]] = [(n, first[n]) for n in self.rank if counts[n] == 1]


def scaler_modules(scaler_functions: Dict[str, List[str]]) -> ScalerModules:
    return facts_index("amp.scaler_modules", tuple(scaler_functions), ScalerModules)


class UnmigratedModules:
    """`RepoFacts.unmigrated_amp` by last name component: name -> (place in the facts, module)."""

    def __init__(self, modules: Tuple[Hashable, ...]):
        self.by_last: Dict[str, List[Tuple[int, str]]] = {}
        for i, m in enumerate(modules):
            self.by_last.setdefault(str(m).rpartition(".")[2], []).append((i, str(m)))


def unmigrated_modules(unmigrated_amp: List[str]) -> UnmigratedModules:
    return facts_index("amp.unmigrated_modules", tuple(unmigrated_amp), UnmigratedModules)


def keys_by_module(keys: Dict[str, object]) -> Dict[str, List[str]]:
    """Facts keys (`root::module`) by their module name, in facts order."""
    def build(ks: Tuple[Hashable, ...]) -> Dict[str, List[str]]:
        out: Dict[str, List[str]] = {}
        for k in ks:
            out.setdefault(str(k).rpartition("::")[2], []).append(str(k))
        return out
    return facts_index("amp.keys_by_module", tuple(keys), build)
