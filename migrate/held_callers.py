"""After pass 1: the helpers that got a scaler parameter while a caller in another file cannot pass it.

The files of one cross-module migration migrate together or not at all. A call of a function that
pass 1 gave a `scaler` parameter (`RepoFacts.scaler_functions`) is updated in pass 2 only when the
calling module migrates too. It is not when the caller's `apex` is a local `apex.py` (A2A160/A2A161:
its apex code is never touched), when its own amp code is left as it is (held back, refused, or an
`amp.initialize` kept for an imported module that keeps apex), or when it has no amp code that
could create or receive a scaler. The engine rewrites each caller as pass 2 would, in memory, with
the facts so far; each call still without the scaler is told to the helper's file, whose pass 1
then keeps the signature (A2A126 naming the call): its module keeps apex, and so, in turn, may the
modules that import it, until nothing changes.
"""
from __future__ import annotations

import ast
import os
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

from codemods.base import RepoFacts
from codemods.records import module_root

from . import discovery

Calls = Dict[int, Dict[str, List[str]]]  # helper file -> facts key -> ["name path:line", ...]


def held_calls(exporting: Dict[int, RepoFacts], python_files: Sequence[int], path_of: Callable[[int], str],
               bytes_of: Callable[[int], Optional[bytes]], rewritten: Callable[[int], Optional[str]]) -> Calls:
    """The calls of the functions each file of `exporting` gave a scaler parameter in pass 1 that
    would still not pass it after the run: found in a caller's bytes, and still there in its text as
    pass 2 would write it (`rewritten`: None when pass 2 leaves the file as it is)."""
    out: Calls = {}
    for i, published in exporting.items():
        for key, names in published.scaler_functions.items():
            if not names:
                continue
            module = key.rpartition("::")[2].rpartition(".")[2]
            param = published.scaler_params.get(key, "scaler")
            hits: List[str] = []
            for j in python_files:
                data = bytes_of(j) if j != i else None
                if not data or not any(n.encode() in data for n in names):
                    continue
                resolver = ImportResolver(path_of(j), path_of(i))
                if not _calls_without(data, module, names, param, resolver):
                    continue
                text = rewritten(j)
                lines = _calls_without(data if text is None else text.encode("utf-8"), module, names, param,
                                       resolver)
                where = os.path.relpath(path_of(j), os.path.dirname(os.path.abspath(path_of(i))))
                hits.extend(f"{name} {where}:{line}" for name, line in lines)
            if hits:
                out.setdefault(i, {})[key] = hits
    return out


class ImportResolver:
    """Whether an import in the file at `importer` may reach the helper's file at `target`: the module
    it names is that file where the importer's import root (or folder, for a relative import) holds
    it, and any module of the same last name where it holds none (found elsewhere on sys.path)."""

    def __init__(self, importer: str, target: str) -> None:
        self.importer = os.path.abspath(importer)
        self.target = os.path.abspath(target)
        mod, _ = discovery.module_name_for(importer)
        self.root = module_root(importer, mod) or os.path.dirname(self.importer)

    def reaches(self, module: str, level: int = 0) -> bool:
        if level:
            base = os.path.dirname(self.importer)
            for _ in range(level - 1):
                base = os.path.dirname(base)
        else:
            base = self.root
        stem = os.path.join(base, *module.split(".")) if module else base
        found = [c for c in (stem + ".py", os.path.join(stem, "__init__.py")) if os.path.isfile(c)]
        return not found or self.target in (os.path.abspath(c) for c in found)


def _calls_without(data: bytes, module: str, names: Sequence[str], param: str,
                   resolver: Optional[ImportResolver] = None) -> List[Tuple[str, int]]:
    """(name, line) of each call of one of `names`, imported from a module whose last name is `module`
    (by name, or as `mod.name(...)`) that `resolver` says may be the helper's file, that neither passes
    `param=` nor has `*args` / `**kwargs`."""
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError):
        return []
    bound: Dict[str, str] = {}
    modules: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and resolver is not None and not any(
                resolver.reaches(f"{node.module}.{a.name}" if node.module else a.name, node.level)
                if a.name == module else resolver.reaches(node.module or "", node.level) for a in node.names):
            continue
        if isinstance(node, ast.ImportFrom):
            if (node.module or "").rpartition(".")[2] == module:
                for alias in node.names:
                    if alias.name == "*":
                        bound.update({n: n for n in names})
                    elif alias.name in names:
                        bound[alias.asname or alias.name] = alias.name
            for alias in node.names:
                if alias.name == module:
                    modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.rpartition(".")[2] == module and (resolver is None or resolver.reaches(alias.name)):
                    modules.add(alias.asname or alias.name)
    out: List[Tuple[str, int]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id in bound:
            name = bound[f.id]
        elif isinstance(f, ast.Attribute) and f.attr in names and _dotted(f.value) in modules:
            name = f.attr
        else:
            continue
        if any(isinstance(a, ast.Starred) for a in node.args) or any(
                k.arg is None or k.arg == param for k in node.keywords):
            continue
        out.append((name, node.lineno))
    return sorted(out, key=lambda t: t[1])


def _dotted(e: ast.expr) -> str:
    if isinstance(e, ast.Name):
        return e.id
    if isinstance(e, ast.Attribute):
        return f"{_dotted(e.value)}.{e.attr}"
    return ""
