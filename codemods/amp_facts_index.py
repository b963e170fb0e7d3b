"""Indexes of the published amp facts, built once per run's facts: each file looks up only its own names."""
from __future__ import annotations

from typing import Dict, Hashable, List, Tuple

from .base import facts_index


class ScalerModules:
    """The keys of `RepoFacts.scaler_functions` (`root::module`) by module name, and by name and import root."""

    def __init__(self, keys: Tuple[Hashable, ...]):
        self.rank: Dict[str, int] = {}  # module name -> its place in the order names first appear
        self.by_name: Dict[str, List[str]] = {}  # name -> keys, in facts order
        self.by_name_root: Dict[Tuple[str, str], str] = {}  # (name, root) -> key
        for key in map(str, keys):
            root, _, name = key.rpartition("::")
            self.rank.setdefault(name, len(self.rank))
            self.by_name.setdefault(name, []).append(key)
            self.by_name_root.setdefault((name, root), key)


def scaler_modules(scaler_functions: Dict[str, List[str]]) -> ScalerModules:
    return facts_index("amp.scaler_modules", scaler_functions, ScalerModules)


class UnmigratedModules:
    """`RepoFacts.unmigrated_amp` by last name component: name -> (place in the facts, module)."""

    def __init__(self, modules: Tuple[Hashable, ...]):
        self.by_last: Dict[str, List[Tuple[int, str]]] = {}
        for i, m in enumerate(modules):
            self.by_last.setdefault(str(m).rpartition(".")[2], []).append((i, str(m)))


def unmigrated_modules(unmigrated_amp: List[str]) -> UnmigratedModules:
    return facts_index("amp.unmigrated_modules", unmigrated_amp, UnmigratedModules)


def keys_by_module(keys: Dict[str, object]) -> Dict[str, List[str]]:
    """Facts keys (`root::module`) by their module name, in facts order."""
    def build(ks: Tuple[Hashable, ...]) -> Dict[str, List[str]]:
        out: Dict[str, List[str]] = {}
        for k in ks:
            out.setdefault(str(k).rpartition("::")[2], []).append(str(k))
        return out
    return facts_index("amp.keys_by_module", keys, build)
