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
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple

from codemods.base import RepoFacts, named_from
from codemods.records import module_root

from . import discovery
from .name_search import NameSearch

Calls = Dict[int, Dict[str, List[str]]]  # helper file -> facts key -> ["name path:line", ...]


def held_calls(exporting: Dict[int, RepoFacts], python_files: Sequence[int], path_of: Callable[[int], str],
               bytes_of: Callable[[int], Optional[bytes]], rewritten: Callable[[int], Optional[str]],
               memo: Any = None) -> Calls:
    """The calls of the functions each file of `exporting` gave a scaler parameter in pass 1 that
    would still not pass it after the run: found in a caller's bytes, and still there in its text as
    pass 2 would write it (`rewritten`: None when pass 2 leaves the file as it is).

    Each file is read and parsed once, and matched only against the helpers its imports may reach
    (`Exporters.reached`), so the cost grows with the files and the helpers, not their product.
    `memo` (a `cache_keys.PassMemo` whose context names `rewritten`'s facts and `exporters.context()`)
    keeps each file's answer for a re-run over unchanged files."""
    exporters = Exporters.of_scaler_functions(exporting, path_of)
    hits: Dict[int, List[str]] = {}
    for j, data, present in exporters.matching(python_files, bytes_of):
        found = exporters.recall(memo, j, data, path_of(j))
        if found is None:
            found = []
            tree = parse_or_none(data)
            importer = ImportResolver(path_of(j))
            if tree is not None:
                found = _held_in(exporters, j, present, tree, importer, path_of, rewritten)
            if memo is not None:
                memo.put(j, data, (found, importer.lookups()))
        for e, lines in found:
            hits.setdefault(e, []).extend(lines)
    return exporters.by_file(hits)


def _held_in(exporters: "Exporters", j: int, present: Set[bytes], tree: ast.AST, importer: "ImportResolver",
             path_of: Callable[[int], str], rewritten: Callable[[int], Optional[str]]) -> List[Tuple[int, List[str]]]:
    """`held_calls` of one caller: (entry, its calls in file j that still lack the parameter)."""
    out: List[Tuple[int, List[str]]] = []
    after: Optional[ast.AST] = None
    for e in exporters.reached(tree, importer, with_names=False):
        i, key, names, module, param = exporters.entries[e]
        if i == j or not any(n.encode() in present for n in names):
            continue
        resolver = importer.toward(path_of(i))
        if not _calls_in(tree, module, names, param, resolver):
            continue
        if after is None:
            text = rewritten(j)
            after = tree if text is None else (parse_or_none(text.encode("utf-8")) or ast.Module(body=[], type_ignores=[]))
        lines = _calls_in(after, module, names, param, resolver)
        where = named_from(path_of(j), path_of(i))
        out.append((e, [f"{name} {where}:{line}" for name, line in lines]))
    return out


class Exporters:
    """The functions files of the run export (file, facts key, names), found from a file's imports:
    by the last name of their module and, where an import resolves to files, by those files."""

    def __init__(self) -> None:
        self.entries: List[Tuple[int, str, Sequence[str], str, str]] = []  # (file, key, names, module, param)
        self._by_module: Dict[str, List[int]] = {}
        self._by_target: Dict[Tuple[str, str], List[int]] = {}
        self._by_name: Dict[str, List[int]] = {}
        self._names: Set[bytes] = set()
        self._search: Optional[NameSearch] = None
        self.paths: Dict[int, str] = {}  # file -> its path

    @classmethod
    def of_scaler_functions(cls, published: Dict[int, RepoFacts], path_of: Callable[[int], str]) -> "Exporters":
        """The functions each file of `published` gave a scaler parameter in pass 1 (`scaler_functions`)."""
        exporters = cls()
        for i, facts in published.items():
            for key, names in facts.scaler_functions.items():
                if names:
                    exporters.add(i, key, names, path_of(i), facts.scaler_params.get(key, "scaler"))
        return exporters

    def matching(self, python_files: Sequence[int], bytes_of: Callable[[int], Optional[bytes]]
                 ) -> Iterator[Tuple[int, bytes, Set[bytes]]]:
        """(file, its bytes, the exported names they hold) for each file that holds one."""
        for j in python_files:
            data = bytes_of(j)
            if not data:
                continue
            present = self.search.present(data)
            if present:
                yield j, data, present

    def context(self) -> str:
        """What the answers about a file depend on besides the file: the entries, in order, and their files."""
        return repr([(key, list(names), module, param, os.path.abspath(self.paths[i]))
                     for i, key, names, module, param in self.entries])

    def recall(self, memo: Any, j: int, data: bytes, path: str) -> Any:
        """File j's answer kept in `memo`, while the imports it looked up still find the same files."""
        kept = memo.get(j, data) if memo is not None else None
        if kept is None:
            return None
        found, lookups = kept
        again = ImportResolver(path)
        if any(again.found(module, level) != files for (module, level), files in lookups):
            return None
        return found

    def by_file(self, hits: Dict[int, List[str]]) -> Dict[int, Dict[str, List[str]]]:
        """Entry -> found uses, regrouped as exporting file -> facts key -> uses (entries with none left out)."""
        out: Dict[int, Dict[str, List[str]]] = {}
        for e, (i, key, _, _, _) in enumerate(self.entries):
            if hits.get(e):
                out.setdefault(i, {})[key] = hits[e]
        return out

    def add(self, i: int, key: str, names: Sequence[str], path: str, param: str = "") -> None:
        e = len(self.entries)
        self.paths[i] = path
        module = key.rpartition("::")[2].rpartition(".")[2]
        self.entries.append((i, key, names, module, param))
        self._by_module.setdefault(module, []).append(e)
        self._by_target.setdefault((module, os.path.abspath(path)), []).append(e)
        for n in dict.fromkeys(names):
            self._by_name.setdefault(n, []).append(e)
            self._names.add(n.encode())
        self._search = None

    @property
    def search(self) -> NameSearch:
        """Finds which of the exported names a file's bytes hold."""
        if self._search is None:
            self._search = NameSearch(self._names)
        return self._search

    def named(self, name: str) -> List[int]:
        """The entries exporting a function of this name."""
        return self._by_name.get(name, [])

    def reached(self, tree: ast.AST, importer: "ImportResolver", with_names: bool) -> List[int]:
        """The entries (in order) whose file an import of `tree` may name, as `ImportResolver.reaches`
        says: `from M import ...` where M's last name is their module's, and, unless `with_names`
        (only the form that binds function names), `from P import M` and `import P.M` too."""
        found: Set[int] = set()

        def add(module: str, spelled: str, level: int) -> None:
            if module not in self._by_module:
                return
            files = importer.found(spelled, level)
            if not files:  # found nowhere: any module of that last name (elsewhere on sys.path)
                found.update(self._by_module[module])
            for f in files:
                found.update(self._by_target.get((module, f), ()))

        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                spelled = node.module or ""
                last = spelled.rpartition(".")[2]
                if with_names:
                    add(last, spelled, node.level)
                    continue
                for module in {last} | {a.name for a in node.names}:
                    for a in node.names:  # the imports `_calls_in` lets through for this module
                        if a.name == module:
                            add(module, f"{node.module}.{a.name}" if node.module else a.name, node.level)
                        else:
                            add(module, spelled, node.level)
            elif isinstance(node, ast.Import) and not with_names:
                for alias in node.names:
                    add(alias.name.rpartition(".")[2], alias.name, 0)
        return sorted(found)


class ImportResolver:
    """Whether an import in the file at `importer` may reach the helper's file at `target`: the module
    it names is that file where the importer's import root (or folder, for a relative import) holds
    it, and any module of the same last name where it holds none (found elsewhere on sys.path)."""

    def __init__(self, importer: str, target: str = "",
                 lookups: Optional[Dict[Tuple[str, int], List[str]]] = None) -> None:
        self.importer = os.path.abspath(importer)
        self.target = os.path.abspath(target) if target else ""
        mod, _ = discovery.module_name_for(importer)
        self.root = module_root(importer, mod) or os.path.dirname(self.importer)
        self._found: Dict[Tuple[str, int], List[str]] = {} if lookups is None else lookups

    def toward(self, target: str) -> "ImportResolver":
        """The same importer, asked about `target` (the files it has looked up are shared)."""
        return ImportResolver(self.importer, target, self._found)

    def found(self, module: str, level: int = 0) -> List[str]:
        """The files (absolute paths) the import of `module` names from the importer, if any."""
        hit = self._found.get((module, level))
        if hit is None:
            if level:
                base = os.path.dirname(self.importer)
                for _ in range(level - 1):
                    base = os.path.dirname(base)
            else:
                base = self.root
            stem = os.path.join(base, *module.split(".")) if module else base
            hit = [os.path.abspath(c) for c in (stem + ".py", os.path.join(stem, "__init__.py")) if os.path.isfile(c)]
            self._found[(module, level)] = hit
        return hit

    def lookups(self) -> List[Tuple[Tuple[str, int], List[str]]]:
        """Every import this importer (and its `toward` copies) looked up, with the files found."""
        return sorted(self._found.items())

    def reaches(self, module: str, level: int = 0) -> bool:
        found = self.found(module, level)
        return not found or self.target in found


def parse_or_none(data: bytes) -> Optional[ast.AST]:
    try:
        return ast.parse(data)
    except (SyntaxError, ValueError):
        return None


def _calls_without(data: bytes, module: str, names: Sequence[str], param: str,
                   resolver: Optional[ImportResolver] = None) -> List[Tuple[str, int]]:
    """(name, line) of each call of one of `names`, imported from a module whose last name is `module`
    (by name, or as `mod.name(...)`) that `resolver` says may be the helper's file, that neither passes
    `param=` nor has `*args` / `**kwargs`."""
    tree = parse_or_none(data)
    return [] if tree is None else _calls_in(tree, module, names, param, resolver)


def _calls_in(tree: ast.AST, module: str, names: Sequence[str], param: str,
              resolver: Optional[ImportResolver] = None) -> List[Tuple[str, int]]:
    """`_calls_without` of a parsed file."""
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
