"""Which file `import apex` reaches from a module of the run: NVIDIA apex, or a local `apex.py`.

Python looks a top-level name up along sys.path, whose first entry is the folder of the script that
was run (or the working folder under `python -m`), for every module of that process. In one folder
`apex` is, in Python's order, a package `apex/__init__.py` (a vendored apex: apex for the migration),
else a module `apex.py` (never NVIDIA apex, which is a package), else a folder without `__init__.py`
(a namespace portion, which an installed apex further along sys.path wins over).

The folders a module may run with first on sys.path: its import root (the folder above its top
package, or its own folder when it lies in no package), where the scripts and `python -m` that import
it by its module name start; and each package folder between the module and that root which holds an
`apex.py` and an entry script (a `__main__` guard or statements at top level) that reaches the module
through its imports (`python pkg/tool.py` runs with pkg/ first). A local `apex.py` seen from every
such folder shadows apex for the module (A2A160); from some of them only, which file `apex` is depends
on how the program starts (A2A161). Either way the module's apex code is left as it is, with a finding
at each import of apex: a wrong rewrite is worse than none. `from .apex import x` and `from pkg.apex
import x` name the local file by its own dotted name and are never apex. Not modelled: sys.path edits,
namespace-package imports of a folder without `__init__.py` from its parent, PYTHONPATH.
"""
from __future__ import annotations

import ast
import functools
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Set, Tuple

from codemods.records import Finding, module_root

# An import that binds something from apex: `from apex...`, `import x, apex.amp as a`, or a dynamic
# import naming apex.
_APEX_IMPORT = re.compile(
    rb"(?m)(?:^|[;:])[ \t]*(?:from[ \t]+apex\b|import[ \t][^\n#]*\bapex\b)"
    rb"|import[^\n]*['\"]apex\b"
)
# An import continued with a backslash, and the rest of its logical line (read whole for the word apex).
_CONTINUED_IMPORT = re.compile(rb"(?m)(?:^|[;:])[ \t]*(?:from|import)[ \t][^\n#]*\\\r?$")
_LOGICAL_LINE = re.compile(rb"(?:[^\n]*\\\r?\n)*[^\n]*")
_APEX_WORD = re.compile(rb"\bapex\b")
_APEX_LITERAL = re.compile(rb"apex")
_BACKSLASH_NEWLINE = re.compile(rb"\\\r?\n")


def has_apex_import(data: bytes) -> bool:
    """Whether an import in `data` may bind something from apex (an import statement continued with a
    backslash counts when its logical line names apex); without the word no import can."""
    if b"apex" not in data:
        return False
    # the regexes have no literal prefix (`re` would try them at every byte): they read only the lines
    # that hold the word, or that end with a backslash
    for m in _APEX_LITERAL.finditer(data):
        if _APEX_IMPORT.search(_physical_line(data, m.start())) is not None:
            return True
    for m in _BACKSLASH_NEWLINE.finditer(data):
        start = data.rfind(b"\n", 0, m.start()) + 1
        if _CONTINUED_IMPORT.search(data, start, m.end()) is not None:
            line = _LOGICAL_LINE.match(data, start)
            if line is not None and _APEX_WORD.search(line.group()) is not None:
                return True
    return False


def _physical_line(data: bytes, at: int) -> bytes:
    """The line of `data` that holds byte `at`, without its newline."""
    start = data.rfind(b"\n", 0, at) + 1
    end = data.find(b"\n", at)
    return data[start:] if end < 0 else data[start:end]


# the codemods whose names resolve under `apex`: none of them may see a module where apex is a local file
APEX_CODEMODS = ("amp", "amp_unresolved", "apex_modules", "apex_parallel", "imports")
_MAIN_GUARD = re.compile(rb"__name__\s*==\s*['\"]__main__['\"]|['\"]__main__['\"]\s*==\s*__name__")


@dataclass(frozen=True)
class Shadow:
    """A local `apex.py` that `import apex` reaches from a module: from every folder the module can
    be imported from (`certain`), or from some of them (`roots`: those folders, `local` first)."""

    local: str
    certain: bool
    roots: Tuple[str, ...]


def local_apex_in(folder: str) -> Optional[str]:
    """The local module `apex.py` that `import apex` finds with `folder` first on sys.path, or None
    when it finds a package there (a vendored apex) or nothing that wins over an installed apex."""
    if os.path.isfile(os.path.join(folder, "apex", "__init__.py")):
        return None
    candidate = os.path.join(folder, "apex.py")
    return candidate if os.path.isfile(candidate) else None


def import_roots(path: str, module_name: str, data: bytes = b"") -> List[str]:
    """The folders that may be sys.path's first entry in a process that imports the module at `path`."""
    root = module_root(path, module_name)
    if not root:
        return []
    roots = [root]
    target = os.path.abspath(path)
    folder = os.path.dirname(target)
    while folder != root and len(folder) > len(root):
        if local_apex_in(folder) is not None and target in _reached_from_scripts_in(folder):
            roots.append(folder)
        folder = os.path.dirname(folder)
    return roots


_REACHED: Dict[str, Tuple[Any, FrozenSet[str]]] = {}


def _reached_from_scripts_in(folder: str) -> FrozenSet[str]:
    """The files a process started from a script in `folder` imports (transitively), scripts included:
    names resolved with `folder` first, then the importing file's own import root. Kept while the
    folder's own files stay as they are."""
    files = [os.path.join(folder, n) for n in _listdir(folder) if n.endswith(".py") and n != "apex.py"]
    stamp = tuple((p, st.st_mtime_ns, st.st_size) for p in files for st in _stat(p))
    hit = _REACHED.get(folder)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    seen: Set[str] = set()
    todo = [p for p in files if _is_entry(_read(p))]
    while todo:
        path = os.path.abspath(todo.pop())
        if path in seen:
            continue
        seen.add(path)
        todo.extend(p for p in _imports_of(path, folder) if p not in seen)
    _REACHED[folder] = (stamp, frozenset(seen))
    return _REACHED[folder][1]


def _stat(path: str) -> List[os.stat_result]:
    try:
        return [os.stat(path)]
    except OSError:
        return []


def _is_entry(data: bytes) -> bool:
    """Whether a file looks like something `python file.py` runs: a `__main__` guard, or statements
    at top level other than imports, definitions and assignments."""
    if _MAIN_GUARD.search(data) is not None:
        return True
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    quiet = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign,
             ast.AnnAssign, ast.AugAssign, ast.Pass, ast.If, ast.Try)
    return any(not isinstance(n, quiet) and not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))
               for n in tree.body)


def _imports_of(path: str, first: str) -> List[str]:
    """The project files `path` imports, resolved from `first` (sys.path[0]) and from its import root."""
    from . import discovery

    data = _read(path)
    out = [os.path.abspath(p) for p in discovery.imported_files(path, data)]
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return out
    for node in ast.walk(tree):
        names: List[List[str]] = []
        if isinstance(node, ast.Import):
            names = [a.name.split(".") for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            base = node.module.split(".")
            names = [base] + [base + [a.name] for a in node.names if a.name != "*"]
        for parts in names:
            for candidate in (os.path.join(first, *parts) + ".py", os.path.join(first, *parts, "__init__.py")):
                if os.path.isfile(candidate):
                    out.append(os.path.abspath(candidate))
    return out


def _listdir(folder: str) -> List[str]:
    try:
        return sorted(os.listdir(folder))
    except OSError:
        return []


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def shadow_for(path: str, module_name: str, data: bytes) -> Optional[Shadow]:
    """The local `apex.py` that this module's imports of apex may reach, or None when they reach apex."""
    if not module_name or not has_apex_import(data):
        return None
    roots = import_roots(path, module_name, data)
    found = [(r, local_apex_in(r)) for r in roots]
    hits = [(r, f) for r, f in found if f is not None]
    if not hits:
        return None
    local = hits[0][1]
    certain = len(hits) == len(found) and all(f == local for _, f in hits)
    return Shadow(local, certain, tuple(r for r, _ in found))  # type: ignore[arg-type]


def cache_marker(path: str, module_name: str) -> str:
    """What a file's cache key adds for its apex: the local `apex.py` files of its import root and of
    the package folders above it, and whether the latter's scripts reach it (a result made before one
    of them came or went is not reused)."""
    root = module_root(path, module_name)
    if not root:
        return ""
    target = os.path.abspath(path)
    marks = [f"\0apex={root}"] if _cached_local_apex_in(root) else []
    folder = os.path.dirname(target)
    while folder != root and len(folder) > len(root):
        if _cached_local_apex_in(folder):
            marks.append(f"\0apex={folder}:{int(target in _reached_from_scripts_in(folder))}")
        folder = os.path.dirname(folder)
    return "".join(marks)


@functools.lru_cache(maxsize=None)  # every file of a folder asks the same question; emptied by forget() each run
def _cached_local_apex_in(folder: str) -> Optional[str]:
    return local_apex_in(folder)


def forget() -> None:
    """Drop what was learned about folders (a new run may see other files)."""
    _cached_local_apex_in.cache_clear()
    _REACHED.clear()


def without_apex_codemods(select: Callable[[str], bool]) -> Callable[[str], bool]:
    """`select`, less the rule codes of the codemods that resolve names under apex."""
    from codemods import registry
    dropped = {c for cm in registry.CODEMODS if cm.NAME in APEX_CODEMODS for c in cm.CODES}
    return lambda code: code not in dropped and select(code)


def apex_imports(data: bytes) -> List[Tuple[int, int, str]]:
    """(line, column, spelling) of each absolute import of apex in the module's source."""
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return []
    out: List[Tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "apex" or alias.name.startswith("apex."):
                    out.append((node.lineno, node.col_offset + 1, f"import {alias.name}"))
                    break
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module and \
                (node.module == "apex" or node.module.startswith("apex.")):
            names = ", ".join(a.name for a in node.names[:3]) + (", ..." if len(node.names) > 3 else "")
            out.append((node.lineno, node.col_offset + 1, f"from {node.module} import {names}"))
    return sorted(out)


def findings_for(shadow: Shadow, path: str, data: bytes) -> List[Finding]:
    """A2A160 (or A2A161 when ambiguous) at each import of apex of the module at `path`."""
    from codemods import amp_rules as R  # here: a run answered from the cache imports no codemod

    local = _shown(shadow.local, path)
    out: List[Finding] = []
    for line, col, spelled in apex_imports(data):
        if shadow.certain:
            rule = R.APEX_SHADOWED
            message = (f"`{spelled}` imports the local file `{local}`, not NVIDIA apex (that file shadows apex for "
                       f"modules run or imported from `{_shown(os.path.dirname(shadow.local), path)}`): this "
                       "module's apex code is left as it is; rename the local file (or migrate by hand) and rerun")
        else:
            where = [_shown(r, path) for r in shadow.roots]
            message = (f"`{spelled}` may import the local file `{local}` instead of NVIDIA apex: this module can run "
                       f"or be imported from {' and from '.join(f'`{w}`' for w in where)}, and which `apex` it "
                       "gets depends on the folder; this module's apex code is left as it is: rename the local "
                       "file (or run the module one way only and migrate by hand) and rerun")
            rule = R.APEX_MAYBE_SHADOWED
        out.append(Finding(rule.code, message, line, col, rule.severity, False, line))
    return out


def merged_findings(findings: List[Finding], shadow: Shadow, path: str, src: Any, new_text: str,
                    select: Callable[[str], bool]) -> List[Finding]:
    """The rewrite's findings with the shadow's (those `select` keeps), in line order; a suppression
    comment on an import's line marks its finding ignored."""
    from codemods.suppression import Suppressions

    own = [f for f in findings_for(shadow, path, src.data) if select(f.code)]
    if not own:
        return findings
    suppressions = Suppressions(src.text)
    moved = new_text != src.text
    for f in own:
        f.ignored = suppressions.covers(f.line, f.code)
        if moved:
            f.new_line = _new_line(src.text, new_text, f.line)
    return sorted(findings + own, key=lambda f: (f.line, f.col, f.code))


def _new_line(old: str, new: str, line: int) -> int:
    """The line of `new` that holds line `line` of `old` (0 when it was rewritten)."""
    import difflib
    a, b = old.splitlines(), new.splitlines()
    for i, j, n in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks():
        if i < line <= i + n:
            return j + line - i
    return 0


def _shown(target: str, importer: str) -> str:
    """`target` as the run shows paths: relative to the working folder when below it (`formats.display_path`)."""
    from .formats import display_path

    return display_path(os.path.abspath(target)).replace(os.sep, "/")
