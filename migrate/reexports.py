"""Which files import, from a module of the project, a name whose apex import pass 1 removed there.

An apex import that nothing in its module reads may still be what other modules import from it:
`pkg/__init__.py` re-exporting `FusedAdam`, `modeling.py` binding `BertLayerNorm` for its siblings.
Removing it breaks `from pkg import FusedAdam` with an ImportError at run time. After pass 1 the
engine asks here which of those names some other file imports (files of the run, and for partial
runs such as pre-commit's the other files under the module's import root), and pass 2 keeps those
imports (the imports codemod reports them instead).
"""
from __future__ import annotations

import os
import re
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple

from . import discovery
from .fileio import SourceError, read_bytes


def imported_names(path: str, data: bytes, target: str, names: Set[str]) -> Set[str]:
    """The names of `names` that the file at `path` imports from module `target`: `from target import
    n` (relative spellings too), a star import of it (all of them), or `import target` with `target.n`
    read somewhere."""
    return _imports(path, data, {target}).get(target, lambda wanted: set())(names)


# `from <module> import <names>` (names in brackets may span lines) and `import <modules>`, read from
# bytes: an import inside a string counts too, which at worst keeps an import that could go
_FROM_IMPORT = re.compile(rb"[ \t]*from[ \t]+(\.*[\w.]*)[ \t]+import[ \t]*(\([^)]*\)|[^\n#;]*)")
_IMPORT = re.compile(rb"[ \t]*import[ \t]+([^\n#;]*)")
_WORD = re.compile(rb"[A-Za-z_]\w*")


def _import_statements(data: bytes) -> Iterator[bytes]:
    """The lines of `data` that hold the word `import`, with a bracketed name list continued to its `)`."""
    pos = data.find(b"import")
    while pos >= 0:
        start = data.rfind(b"\n", 0, pos) + 1
        end = data.find(b"\n", pos)
        end = len(data) if end < 0 else end
        line = data[start:end]
        if b"(" in line and b")" not in line:
            close = data.find(b")", end)
            end = len(data) if close < 0 else close + 1
            line = data[start:end]
        yield line
        pos = data.find(b"import", end)


def _imports(path: str, data: bytes, targets: Set[str]):
    """module -> (names -> the ones of them this file imports from that module), for the modules of
    `targets` this file imports from (its package is worked out only for a relative import)."""
    package: Optional[List[str]] = None
    named: Dict[str, Set[str]] = {}
    star: Set[str] = set()
    whole: Dict[str, Set[bytes]] = {}  # module -> how the file spells it
    for line in _import_statements(data):
        m = _FROM_IMPORT.match(line)
        if m is not None:
            spec = m.group(1).decode("ascii", "replace")
            level = len(spec) - len(spec.lstrip("."))
            if level:
                if package is None:
                    package = discovery.package_of(path)
                parts = discovery.resolve_from(level, spec[level:] or None, package)
                source = ".".join(parts) if parts else None
            else:
                source = spec
            if source not in targets:
                continue
            names = m.group(2)
            if names.strip().startswith(b"*"):
                star.add(source)  # type: ignore[arg-type]
            else:
                # `a as b` imports a; keywords and aliases are extra words, which at worst keep an import
                named.setdefault(source, set()).update(w.decode() for w in _WORD.findall(names))  # type: ignore[arg-type]
            continue
        m = _IMPORT.match(line)
        if m is not None:
            for part in m.group(1).split(b","):
                words = part.split()
                if words and words[0].decode("ascii", "replace") in targets:
                    # `import a.b` reads a.b.name; `import a.b as c` reads c.name
                    spelled = words[2] if len(words) == 3 and words[1] == b"as" else words[0]
                    whole.setdefault(words[0].decode("ascii", "replace"), set()).add(spelled)
    out = {}
    for source in set(named) | star | set(whole):
        out[source] = _reader(data, named.get(source, set()), source in star, whole.get(source, set()))
    return out


def _reader(data: bytes, named: Set[str], star: bool, spellings: Set[bytes]):
    """names -> the ones of them a file takes from one module: all with a star import, those it
    names in `from m import`, and those it reads as `<spelling>.<name>` after `import m`."""
    def taken(wanted: Set[str]) -> Set[str]:
        if star:
            return set(wanted)
        out = named & set(wanted)
        for name in wanted - out:
            if any(re.search(rb"(?<![\w.])" + re.escape(s) + rb"\s*\.\s*" + re.escape(name.encode()) + rb"\b", data)
                   for s in spellings):
                out.add(name)
        return out
    return taken


def split_key(key: str) -> Tuple[str, str]:
    """(import root, module) of a facts key (`codemods.base.facts_key`)."""
    root, sep, module = key.partition("::")
    return (root, module) if sep else ("", key)


def find_importers(dropped: Dict[str, List[str]], run_files: Sequence[Tuple[str, Optional[bytes]]],
                   publishers: Dict[str, Set[str]], walked: Sequence[str] = (),
                   mapper: Optional[Callable[[List[Tuple[List[str], Dict[str, List[str]], Dict[str, Set[str]]]]],
                                             Iterable[List[Tuple[str, str, str]]]]] = None,
                   memo: Any = None) -> Dict[str, Dict[str, str]]:
    """module key -> name -> a file importing that name from that module, for the names pass 1
    `dropped`. `run_files`: (path, bytes or None to read) of the run's Python files; `publishers`:
    module key -> the paths of that module's own files (not counted as importers); `walked`: the
    folders the run walked whole. Files under a module's import root that the run did not see are
    read too (a partial run, such as pre-commit's). Each file's import statements are read once.
    `mapper`: runs `scan_task` over chunks of paths to read (in worker processes), results in order.
    `memo`: keeps each file's importers for a re-run (`get(path, data)` / `put(path, data, value)`,
    for `dropped` and `publishers` as they are now)."""
    targets = _targets(dropped)
    if not targets:
        return {}
    roots = sorted({split_key(k)[0] for keys in targets.values() for k in keys})
    walked_dirs = [os.path.abspath(w) for w in walked if os.path.isdir(w)]
    unseen = [r for r in roots if r and not any(os.path.commonpath([r, w]) == w for w in walked_dirs)]
    in_run = {os.path.abspath(p) for p, _ in run_files} if unseen else set()  # what the walks of `unseen` skip
    files = list(_candidates(run_files, unseen, in_run))
    hits: List[Tuple[str, str, str]] = []
    to_read = [p for p, data in files if data is None]
    if mapper is not None and len(to_read) >= SCAN_CHUNK:
        chunks = [to_read[k:k + SCAN_CHUNK] for k in range(0, len(to_read), SCAN_CHUNK)]
        for found in mapper([(chunk, dropped, publishers) for chunk in chunks]):
            hits.extend(found)
        files = [(p, data) for p, data in files if data is not None]
    hits.extend(_scan(files, dropped, publishers, memo))
    out: Dict[str, Dict[str, str]] = {}
    for key, name, path in sorted(hits, key=lambda h: (h[0], h[1])):
        out.setdefault(key, {}).setdefault(name, path)
    return out


SCAN_CHUNK = 256  # paths per scan task in the pool


def scan_task(task: Tuple[List[str], Dict[str, List[str]], Dict[str, Set[str]]]) -> List[Tuple[str, str, str]]:
    """`_scan` of a chunk of paths (read here): for the pool."""
    paths, dropped, publishers = task
    return _scan([(p, None) for p in paths], dropped, publishers)


def _targets(dropped: Dict[str, List[str]]) -> Dict[str, List[str]]:
    """module -> the facts keys of that name with dropped imports."""
    targets: Dict[str, List[str]] = {}
    for key, names in dropped.items():
        module = split_key(key)[1]
        if names and module:
            targets.setdefault(module, []).append(key)
    return targets


def _scan(files: Iterable[Tuple[str, Optional[bytes]]], dropped: Dict[str, List[str]],
          publishers: Dict[str, Set[str]], memo: Any = None) -> List[Tuple[str, str, str]]:
    """(key, name, importer path) for each dropped name a file imports from its module (`memo`: as
    `find_importers`'s, kept for the files that may import one)."""
    from codemods.base import module_root  # here: runs that drop no apex import do not import codemods
    targets = _targets(dropped)
    # an importer spells the module's last name (`from pkg.modeling import`, `from .modeling import`),
    # except `from . import name` of a package's own names
    tails = {m.rsplit(".", 1)[-1].encode() for m in targets}
    packages = any(_is_package(k) for keys in targets.values() for k in keys)
    hits: List[Tuple[str, str, str]] = []
    for path, data in files:
        if data is None:
            try:
                data = read_bytes(path)
            except SourceError:
                continue
        if b"import" not in data or not (_spells_a_tail(data, tails) or (packages and b"from ." in data)):
            continue
        kept = memo.get(path, data) if memo is not None else None
        if kept is not None and kept[0] == packages:
            hits.extend(kept[1])
            continue
        mine = _importers_in(path, data, targets, dropped, publishers, module_root)
        if memo is not None:
            memo.put(path, data, (packages, mine))
        hits.extend(mine)
    return hits


def _importers_in(path: str, data: bytes, targets: Dict[str, List[str]], dropped: Dict[str, List[str]],
                  publishers: Dict[str, Set[str]], module_root: Callable[[str, str], str]) -> List[Tuple[str, str, str]]:
    """`_scan` of one file that may import a target."""
    hits: List[Tuple[str, str, str]] = []
    found = _imports(path, data, set(targets))
    if not found:
        return hits
    root = module_root(path, discovery.module_name_for(path)[0])
    for module, keys in targets.items():
        if module not in found:
            continue
        for key in keys:
            key_root = split_key(key)[0]
            if (key_root and root and key_root != root) or os.path.abspath(path) in publishers.get(key, set()):
                continue
            hits.extend((key, name, path) for name in sorted(found[module](set(dropped[key]))))
    return hits


_FEW_TAILS = 16  # up to this many module names, a file is searched for each; past it, its import lines' words


def _spells_a_tail(data: bytes, tails: Set[bytes]) -> bool:
    """Whether `data` may import one of the modules whose last names are `tails` (a superset of what
    `_imports` finds: the module's last name is a word of an import statement). A run that dropped
    imports in hundreds of modules would otherwise search every file once per module."""
    if len(tails) <= _FEW_TAILS:
        return any(t in data for t in tails)
    return any(not tails.isdisjoint(_WORD.findall(line)) for line in _import_statements(data))


def _is_package(key: str) -> bool:
    """Whether the module of a facts key is a package (its file an `__init__.py`)."""
    root, module = split_key(key)
    return bool(root) and os.path.isfile(os.path.join(root, *module.split("."), "__init__.py"))


def _candidates(run_files: Sequence[Tuple[str, Optional[bytes]]], roots: Sequence[str], in_run: Set[str]
                ) -> Iterable[Tuple[str, Optional[bytes]]]:
    yield from run_files
    for root in roots:
        if not os.path.isdir(root):
            continue
        for d in discovery.discover([root], kinds=[discovery.PYTHON]):
            path = os.path.abspath(d.path)
            if path not in in_run:
                in_run.add(path)
                yield d.path, None
