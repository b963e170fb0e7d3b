"""Which files a run looks at: Python sources, notebooks and launch files, minus ignored folders.

Skips version-control folders, virtualenvs, build and cache folders, anything `.gitignore` files and
`.git/info/exclude` ignore (read by pathspec, with git's semantics) and `--exclude` globs. Files
named explicitly on the command line are always taken.
"""
from __future__ import annotations

import fnmatch
import functools
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator, List, Optional, Sequence, Tuple

if TYPE_CHECKING:  # imported where first needed: a run over named files reads no .gitignore
    import pathspec

SKIP_DIRS = {
    ".git", ".hg", ".svn", ".bzr", "__pycache__", ".venv", "venv", ".env", ".tox", ".nox", "build", "dist",
    ".eggs", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".hypothesis", "node_modules", "site-packages",
    ".ipynb_checkpoints", ".cache", "__pypackages__", ".apex2amp_cache",
}

PYTHON = "python"
NOTEBOOK = "notebook"
SHELL = "shell"
MARKDOWN = "markdown"
CONFIG = "config"  # YAML / INI job and CI definitions: launch commands in them are reported (A2A414)
CONFIG_SUFFIXES = (".yaml", ".yml", ".cfg", ".ini")


def file_kind(path: str) -> Optional[str]:
    """The kind of a file by its name, or None for files the tool does not handle."""
    name = os.path.basename(path)
    low = name.lower()
    if low.endswith((".py", ".pyw")):
        return PYTHON
    if low.endswith(".ipynb"):
        return NOTEBOOK
    if low.endswith((".sh", ".bash", ".zsh")) or name in ("Makefile", "makefile", "GNUmakefile") \
            or low.endswith(".mk") or name == "Dockerfile" or low.startswith("dockerfile") \
            or low.endswith(".dockerfile") or low.endswith((".slurm", ".sbatch")):
        return SHELL
    if low in ("readme.md", "readme.rst", "readme.txt") or low.endswith(".md"):
        return MARKDOWN
    if low.endswith(CONFIG_SUFFIXES):
        return CONFIG
    return None


_SHELL_SHEBANG = re.compile(rb"^#![^\n]*\b(?:ba|z|da|k)?sh\b")


def _kind_by_shebang(path: str) -> Optional[str]:
    """SHELL for a named file without a known suffix that starts `#!/bin/bash` (a launch script
    pre-commit hands over as `shell`), else None."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(128)
    except OSError:
        return None
    return SHELL if _SHELL_SHEBANG.match(head) else None


def _rules_of(lines: Sequence[str]) -> pathspec.GitIgnoreSpec:
    """The gitignore rules of `lines`, read by pathspec (git's own semantics: `\\!` and `\\*` escapes,
    trailing spaces, `**`); a rule Python's regex cannot compile (`[z-a]`) matches nothing, as git
    ignores such a line."""
    import pathspec

    patterns = []
    for line in lines:
        line = line.rstrip("\n").rstrip("\r")
        try:
            patterns.extend(pathspec.GitIgnoreSpec.from_lines([line]).patterns)
        except re.error:
            continue
    return pathspec.GitIgnoreSpec(patterns)


class GitIgnore:
    """The rules of one `.gitignore` file (or of `.git/info/exclude`), relative to `folder`."""

    def __init__(self, folder: str, lines: Sequence[str]):
        self.folder = folder
        self.prefix = os.path.join(folder, "")
        self.spec = _rules_of(lines)

    def match(self, path: str, is_dir: bool) -> Optional[bool]:
        """True: ignored; False: re-included (`!pattern`); None: no rule names `path`."""
        if path.startswith(self.prefix):
            rel = path[len(self.prefix):].replace(os.sep, "/")
        else:
            rel = os.path.relpath(path, self.folder).replace(os.sep, "/")
            if rel.startswith(".."):
                return None
        return self.spec.check_file(rel + "/" if is_dir else rel).include


def _load_gitignore(folder: str, name: str = ".gitignore") -> Optional[GitIgnore]:
    p = os.path.join(folder, name)
    try:
        with open(p, encoding="utf-8", errors="replace") as fh:
            return GitIgnore(folder, fh.readlines())
    except OSError:
        return None


def _ignored(path: str, is_dir: bool, stack: List[GitIgnore]) -> bool:
    verdict = False
    for gi in stack:
        v = gi.match(path, is_dir)
        if v is not None:
            verdict = v
    return verdict


def _excluded(path: str, root: str, excludes: Sequence[str]) -> bool:
    if not excludes:
        return False
    rel = os.path.relpath(path, root).replace(os.sep, "/")
    name = os.path.basename(path)
    for pat in excludes:
        pat = pat.rstrip("/")
        if fnmatch.fnmatch(rel, pat) or fnmatch.fnmatch(name, pat) or fnmatch.fnmatch(path, pat) \
                or rel.startswith(pat + "/"):
            return True
    return False


def _is_virtualenv(folder: str) -> bool:
    return os.path.exists(os.path.join(folder, "pyvenv.cfg"))


@dataclass(frozen=True)
class Discovered:
    path: str
    kind: str
    root: str
    real: str = field(default="", compare=False, repr=False)  # its real path when the walk knew it


def discover(paths: Sequence[str], excludes: Sequence[str] = (), kinds: Optional[Sequence[str]] = None
             ) -> Iterator[Discovered]:
    """Yield the files to process below `paths`, sorted within each folder, each once."""
    seen = set()
    for top in paths:
        if os.path.isdir(top) and not os.path.islink(top) or (os.path.isdir(top)):
            root = os.path.abspath(top)
            for d in _walk(root, excludes, kinds):
                key = d.real or (os.path.realpath(d.path) if os.path.exists(d.path) else d.path)
                if key not in seen:
                    seen.add(key)
                    yield d
        else:
            kind = file_kind(top) or _kind_by_shebang(top) or PYTHON
            if kinds is not None and kind not in kinds:
                continue
            key = os.path.realpath(top) if os.path.exists(top) else top
            if key not in seen:
                seen.add(key)
                yield Discovered(top, kind, os.path.dirname(os.path.abspath(top)))


def _walk(root: str, excludes: Sequence[str], kinds: Optional[Sequence[str]]) -> Iterator[Discovered]:
    stack: List[GitIgnore] = []
    # .gitignore files of enclosing folders up to the repository top apply too
    parents = []
    cur = root
    while True:
        parents.append(cur)
        if os.path.isdir(os.path.join(cur, ".git")):
            break
        nxt = os.path.dirname(cur)
        if nxt == cur:
            parents = [root]
            break
        cur = nxt
    if os.path.isdir(os.path.join(parents[-1], ".git")):
        # the repository's own excludes, below every .gitignore (git reads them first)
        gi = _load_gitignore(parents[-1], os.path.join(".git", "info", "exclude"))
        if gi:
            stack.append(gi)
    for folder in reversed(parents[1:]):
        gi = _load_gitignore(folder)
        if gi:
            stack.append(gi)
    yield from _walk_dir(root, root, excludes, kinds, stack, set())


def _walk_dir(folder: str, root: str, excludes: Sequence[str], kinds: Optional[Sequence[str]],
              stack: List[GitIgnore], visited: set) -> Iterator[Discovered]:
    try:
        real = os.path.realpath(folder)
    except OSError:
        return
    if real in visited:
        return
    visited.add(real)
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return
    if any(e.name == ".gitignore" for e in entries):  # no failed open in every folder without one
        gi = _load_gitignore(folder)
        if gi:
            stack = stack + [gi]
    real_prefix = os.path.join(real, "")
    for entry in entries:
        path = entry.path  # os.path.join(folder, entry.name), made by scandir
        try:
            is_dir = entry.is_dir()
        except OSError:
            is_dir = False
        if is_dir:
            if entry.name in SKIP_DIRS or entry.name.endswith(".egg-info") or _is_virtualenv(path):
                continue
            if _ignored(path, True, stack) or _excluded(path, root, excludes):
                continue
            yield from _walk_dir(path, root, excludes, kinds, stack, visited)
            continue
        kind = file_kind(entry.name)
        if kind is None or (kinds is not None and kind not in kinds):
            continue
        if _ignored(path, False, stack) or _excluded(path, root, excludes):
            continue
        try:
            link = entry.is_symlink()
        except OSError:
            link = True
        yield Discovered(path, kind, root, "" if link else real_prefix + entry.name)


def module_name_for(path: str) -> Tuple[str, bool]:
    """Dotted module name of a Python file (walking up through packages) and whether it is a package."""
    path = os.path.abspath(path)
    folder, base = os.path.split(path)
    stem = os.path.splitext(base)[0]
    is_pkg = stem == "__init__"
    parts = list(_package_of(folder)) + ([] if is_pkg else [stem])
    return ".".join(p for p in parts if p), is_pkg


def forget_packages() -> None:
    """Drop what `module_name_for` learned about folders (a new run may see other packages)."""
    _package_of.cache_clear()


@functools.lru_cache(maxsize=None)  # every file of a folder asks the same question; emptied each run (forget_packages)
def _package_of(folder: str) -> Tuple[str, ...]:
    """The package names `folder` lies in, outermost first (empty when it holds no __init__.py)."""
    if not os.path.exists(os.path.join(folder, "__init__.py")):
        return ()
    parent, name = os.path.split(folder)
    if not name:
        return ()
    return _package_of(parent) + (name,)


def package_of(path: str) -> List[str]:
    """The package a Python file's relative imports start from (its own, for an `__init__.py`)."""
    module, is_pkg = module_name_for(path)
    return module.split(".") if is_pkg else module.split(".")[:-1]


def resolve_from(level: int, module: Optional[str], package: Sequence[str]) -> Optional[List[str]]:
    """The absolute dotted parts of `from <level dots><module> import ...` written in `package`,
    or None when the dots climb above the import root."""
    if level:
        if level - 1 > len(package):
            return None
        base = list(package[:len(package) - (level - 1)])
    else:
        base = []
    return base + (module.split(".") if module else [])


def imported_files(path: str, data: bytes) -> List[str]:
    """The files of the modules a Python file imports that lie under its own import root (the
    project's, not installed packages'): `from engine import f` -> ROOT/engine.py, `from .utils
    import g` -> the sibling, `from pkg import mod` -> ROOT/pkg/mod.py when that is a module."""
    import ast

    from codemods.base import module_root  # here: a run that needs no facts does not import the codemods

    module, is_pkg = module_name_for(path)
    if not module:
        return []
    root = module_root(path, module)
    package = package_of(path)
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return []
    dotted: List[List[str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            dotted.extend(a.name.split(".") for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = resolve_from(node.level, node.module, package)
            if base is None:
                continue
            dotted.append(base)
            dotted.extend(base + [a.name] for a in node.names if a.name != "*")
    out: List[str] = []
    for parts in dotted:
        if not parts:
            continue
        for candidate in (os.path.join(root, *parts) + ".py", os.path.join(root, *parts, "__init__.py")):
            if candidate not in out and os.path.isfile(candidate):
                out.append(candidate)
    return out
