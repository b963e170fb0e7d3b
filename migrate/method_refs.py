"""After pass 1: the methods that got a scaler parameter and that another file of the run references.

A method may take a new parameter only when every call site is updated. Pass 1 sees one file; calls
on an instance in another module (`trainer.train(loader)` in experiment.py) cannot be matched to the
class there, so any `.name` in another Python file of the run counts as such a reference: the
publishing file is then rewritten again with those names (`RepoFacts.foreign_method_refs`), and its
amp migration refuses (A2A126) instead of breaking the caller.
"""
from __future__ import annotations

import re
from typing import Callable, Dict, List, Optional, Sequence

from codemods.base import RepoFacts


def foreign_refs(published: Dict[int, RepoFacts], python_files: Sequence[int],
                 bytes_of: Callable[[int], Optional[bytes]]) -> Dict[int, Dict[str, List[str]]]:
    """File index -> {facts key: the method names it published that another of `python_files` spells
    as `.name`}, for the files whose published `scaler_methods` some other file references."""
    out: Dict[int, Dict[str, List[str]]] = {}
    for i, facts in published.items():
        for key, names in facts.scaler_methods.items():
            pattern = re.compile(rb"\.\s*(" + b"|".join(re.escape(n.encode()) for n in names) + rb")\b")
            hit: List[str] = []
            for j in python_files:
                if j == i:
                    continue
                data = bytes_of(j)
                for m in pattern.finditer(data or b""):
                    name = m.group(1).decode()
                    if name not in hit:
                        hit.append(name)
            if hit:
                out.setdefault(i, {})[key] = hit
    return out
