"""After pass 1: the methods that got a scaler parameter and that another file of the run references.

A method may take a new parameter only when every call site is updated. Pass 1 sees one file; calls
on an instance in another module (`trainer.train(loader)` in experiment.py) cannot be matched to the
class there, so any `.name` in another Python file of the run counts as such a reference: the
publishing file is then rewritten again with those names (`RepoFacts.foreign_method_refs`), and its
amp migration refuses (A2A126) instead of breaking the caller. Likewise a module-level function that
got the parameter and that another file uses as a value (a callback, a partial, a registry entry):
its callers are out of reach, so it keeps its signature (`RepoFacts.foreign_value_refs`).
"""
from __future__ import annotations

import ast
import os
import re
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from codemods.base import RepoFacts, named_from

from .held_callers import Exporters, ImportResolver, parse_or_none
from .local_instances import local_instance_attributes


def foreign_refs(published: Dict[int, RepoFacts], python_files: Sequence[int],
                 bytes_of: Callable[[int], Optional[bytes]]) -> Dict[int, Dict[str, List[str]]]:
    """File index -> {facts key: the method names it published that another of `python_files` spells
    as `.name`}, for the files whose published `scaler_methods` some other file references.

    Each file is read once: where its `.word` spellings first occur (the first two files each word
    occurs in suffice, one of them is not the publisher's), and each key looks its names up there."""
    lists = [names for facts in published.values() for names in facts.scaler_methods.values()]
    wanted: Set[str] = {n for names in lists for n in names}
    if not all(lists) or not all(_IDENTIFIER.match(n) for n in wanted):
        return _foreign_refs_by_key(published, python_files, bytes_of)
    if not wanted:
        return {}
    first: Dict[str, List[Tuple[int, int, int]]] = {}  # word -> [(order, position, file)] in two files
    for order, j in enumerate(python_files):
        data = bytes_of(j) or b""
        if b"." not in data:
            continue
        for m in _DOT_WORD.finditer(data):
            word = m.group(1).decode()
            if word not in wanted:
                continue
            seen = first.setdefault(word, [])
            if len(seen) < 2 and all(f != j for _, _, f in seen):
                seen.append((order, m.start(), j))
    out: Dict[int, Dict[str, List[str]]] = {}
    for i, facts in published.items():
        for key, names in facts.scaler_methods.items():
            at = []
            for name in dict.fromkeys(names):
                where = next(((o, p) for o, p, j in first.get(name, ()) if j != i), None)
                if where is not None:
                    at.append((where, name))
            if at:
                out.setdefault(i, {})[key] = [name for _, name in sorted(at)]
    return out


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# `.name` as `re.escape(name)` + `\b` after `\.\s*` finds it: the whole ASCII word after the dot
_DOT_WORD = re.compile(rb"\.\s*([A-Za-z0-9_]+)")


def _foreign_refs_by_key(published: Dict[int, RepoFacts], python_files: Sequence[int],
                         bytes_of: Callable[[int], Optional[bytes]]) -> Dict[int, Dict[str, List[str]]]:
    """`foreign_refs` for names that are not ASCII identifiers (or none): every file searched once per key."""
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


def foreign_value_refs(published: Dict[int, RepoFacts], python_files: Sequence[int],
                       bytes_of: Callable[[int], Optional[bytes]], path_of: Callable[[int], str],
                       memo: Any = None) -> Dict[int, Dict[str, List[str]]]:
    """File index -> {facts key: "name path:line" for each module-level function it published in
    `scaler_functions` that another of `python_files` uses as a value}: imported by name from a module
    of that last name and read other than as a call's callee (`Engine(train_step)`, `partial(train_step,
    ...)`, `callbacks=[train_step]`, `registry["x"] = train_step`), or `.train_step` read so on any
    receiver but `self` / `cls`. Such a function keeps its signature (RepoFacts.foreign_value_refs).

    Each file is read and parsed once, and looked at only for the functions it may import (by
    `from M import`, `held_callers.Exporters`) or reads as `.name` values. `memo` (a
    `cache_keys.PassMemo` whose context is `exporters.context()`) keeps each file's answer for a
    re-run over unchanged files."""
    exporters = Exporters.of_scaler_functions(published, path_of)
    hits: Dict[int, List[str]] = {}
    for j, data, present in exporters.matching(python_files, bytes_of):
        found = exporters.recall(memo, j, data, path_of(j))
        if found is None:
            found = []
            tree = parse_or_none(data)
            importer = ImportResolver(path_of(j))
            if tree is not None:
                found = _value_refs_in(exporters, j, present, tree, importer, path_of)
            if memo is not None:
                memo.put(j, data, (found, importer.lookups()))
        for e, uses in found:
            hits.setdefault(e, []).extend(uses)
    return exporters.by_file(hits)


def _value_refs_in(exporters: Exporters, j: int, present: Set[bytes], tree: ast.AST, importer: ImportResolver,
                   path_of: Callable[[int], str]) -> List[Tuple[int, List[str]]]:
    """`foreign_value_refs` of one file: (entry, its value uses in file j)."""
    reached = set(exporters.reached(tree, importer, with_names=True))
    callees = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and id(node) not in callees \
                and not _own_attribute(node):
            reached.update(exporters.named(node.attr))
    out: List[Tuple[int, List[str]]] = []
    for e in sorted(reached):
        i, key, names, module, _ = exporters.entries[e]
        if i == j or not any(n.encode() in present for n in names):
            continue
        where = named_from(path_of(j), path_of(i))
        out.append((e, [f"{name} {where}:{line}" for name, line in
                        _value_uses(tree, module, names, importer.toward(path_of(i)))]))
    return out


def _value_uses(tree: ast.AST, module: str, names: Sequence[str], resolver: "ImportResolver") -> List[Tuple[str, int]]:
    """(name, line) of each read of one of `names` (functions of `module`) that is not a call's callee."""
    bound: Dict[str, str] = {}  # local name -> function name
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").rpartition(".")[2] == module and \
                resolver.reaches(node.module or "", node.level):
            for alias in node.names:
                if alias.name == "*":
                    bound.update({n: n for n in names})
                elif alias.name in names:
                    bound[alias.asname or alias.name] = alias.name
    callees = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    modules = _imported_modules(tree)
    instances = local_instance_attributes(tree)  # `corpus = cls(...)`, then `corpus.train`: not the function
    out: List[Tuple[str, int]] = []
    for node in ast.walk(tree):
        if id(node) in callees:
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in bound:
            out.append((bound[node.id], node.lineno))
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and node.attr in names \
                and not _own_attribute(node) and not _other_modules_attribute(node, modules, module) \
                and id(node) not in instances:
            out.append((node.attr, node.lineno))
    return sorted(out, key=lambda t: t[1])


def _imported_modules(tree: ast.Module) -> Dict[str, str]:
    """Local name -> module, for the names only an `import` statement binds (`import tensorflow as tf`,
    `import os.path` binding `os`); a name also bound otherwise (assigned, a parameter, a def) is left out."""
    modules: Dict[str, str] = {}
    other = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                local, target = (alias.asname, alias.name) if alias.asname else (alias.name.partition(".")[0],) * 2
                if modules.setdefault(local, target) != target:
                    other.add(local)  # two imports bind it to different modules: either may be read
        elif isinstance(node, ast.ImportFrom):
            other.update((a.asname or a.name) for a in node.names)
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            other.add(node.id)
        elif isinstance(node, ast.arg):
            other.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            other.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            other.update(node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            other.add(node.name)
    return {k: v for k, v in modules.items() if k not in other}


def _other_modules_attribute(node: ast.Attribute, modules: Dict[str, str], module: str) -> bool:
    """`tf.train` / `np.random.train`: an attribute of an imported module (or of one of its submodules)
    that is not the publishing module (last name `module`), so not the published function."""
    parts: List[str] = []
    value = node.value
    while isinstance(value, ast.Attribute):
        parts.append(value.attr)
        value = value.value
    if not isinstance(value, ast.Name) or value.id not in modules:
        return False
    dotted = ".".join([modules[value.id]] + parts[::-1])
    return dotted.rpartition(".")[2] != module


def _own_attribute(node: ast.Attribute) -> bool:
    """`self.train` / `cls.train`: an attribute of the instance or class, never another module's
    function (binding one there, `self.train = train`, reads the imported name, which counts)."""
    return isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
