"""A persistent cache of per-file results, so that a second run over unchanged files parses nothing.

Like ruff's and black's caches, it lives in a folder (`.apex2amp_cache` beside the project's
pyproject.toml, else in the working folder; `--cache-dir` or APEX2AMP_CACHE_DIR move it,
`--no-cache` turns it off). What a file gets depends only on:

- apex2amp itself (the bytes of its sources), libcst's and Python's versions,
- the run's settings (options, selection, per-file ignores, prefilter),
- the file: its path, its module name (which depends on the packages around it) and its bytes,
- for pass 2 only, the repo facts pass 1 gathered (a digest of them).

The first two name the cache's bucket; the rest key the entries. An entry holds the screen's
verdict, pass 1's rewrite with the facts it published, and the latest pass 2 rewrite. A cached
rewrite is still written the normal way: only over a file that still holds the text it was made
from. The bucket is one pickle, loaded once and replaced atomically at the end of a run; a cache
that cannot be read is ignored, one that cannot be written only costs the next run its speed.
"""
from __future__ import annotations

import hashlib
import os
import pickle
import sys
import tempfile
from typing import Any, Dict, List, Optional, Tuple

CACHE_FOLDER = ".apex2amp_cache"
_MAX_ENTRIES = 200_000  # a bucket past this is started afresh (a cache, not an archive)
_tool_digest: Optional[str] = None


def digest(data: bytes) -> bytes:
    """The key of a file's bytes."""
    return hashlib.blake2b(data, digest_size=16).digest()


def tool_fingerprint() -> str:
    """apex2amp's sources, libcst's and Python's versions: a change in any of them empties the cache."""
    global _tool_digest
    if _tool_digest is None:
        import libcst
        h = hashlib.blake2b(digest_size=16)
        here = os.path.dirname(os.path.abspath(__file__))
        roots = [here, os.path.join(os.path.dirname(here), "codemods")]
        for root in roots:
            for folder, dirs, names in os.walk(root):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                for name in sorted(names):
                    if name.endswith((".py", ".json")):
                        path = os.path.join(folder, name)
                        h.update(os.path.relpath(path, os.path.dirname(here)).encode())
                        with open(path, "rb") as fh:
                            h.update(fh.read())
        h.update(f"{getattr(libcst, '__version__', '?')} {sys.version}".encode())
        _tool_digest = h.hexdigest()
    return _tool_digest


def default_dir(paths: Any, config_file: Optional[str]) -> str:
    """APEX2AMP_CACHE_DIR, else beside `config_file` (the pyproject.toml the settings come from), else
    beside the project's pyproject.toml (the closest above the first path, up to the repository top,
    without a [tool.apex2amp] table), else in the working folder (what `--help` says)."""
    env = os.environ.get("APEX2AMP_CACHE_DIR")
    if env:
        return env
    config_file = config_file or project_pyproject(list(paths or ()))
    base = os.path.dirname(os.path.abspath(config_file)) if config_file else os.getcwd()
    return os.path.join(base, CACHE_FOLDER)


def project_pyproject(paths: List[str]) -> Optional[str]:
    """The closest pyproject.toml above the first path, up to the repository top (a folder with `.git`)."""
    start = os.path.abspath(paths[0] if paths else ".")
    cur = start if os.path.isdir(start) else os.path.dirname(start)
    while True:
        cand = os.path.join(cur, "pyproject.toml")
        if os.path.isfile(cand):
            return cand
        nxt = os.path.dirname(cur)
        if os.path.exists(os.path.join(cur, ".git")) or nxt == cur:
            return None
        cur = nxt


class ResultCache:
    """One bucket of the cache: entries keyed by (path, module name, bytes digest)."""

    def __init__(self, folder: str, settings: str):
        self.folder = folder
        self.bucket = os.path.join(folder, hashlib.blake2b(
            f"{tool_fingerprint()}|{settings}".encode(), digest_size=16).hexdigest() + ".pickle")
        self.entries: Dict[Tuple[str, str, bytes], Dict[str, Any]] = {}
        self.dirty = False
        try:
            with open(self.bucket, "rb") as fh:
                loaded = pickle.load(fh)
            if isinstance(loaded, dict) and len(loaded) < _MAX_ENTRIES:
                self.entries = loaded
        except Exception:  # noqa: BLE001 - absent, truncated or from another version: start empty
            self.entries = {}
        self._by_path = {k[0]: k for k in self.entries}  # one entry per file: its latest bytes

    def get(self, key: Tuple[str, str, bytes], what: str) -> Any:
        """A copy of the cached `what` ("screen", "pass1", "pass2:<facts digest>", a cross-module pass's
        "<pass>:<digest of what it was told>") of `key`, or None."""
        entry = self.entries.get(key)
        if entry is None or what not in entry:
            return None
        value = entry[what]
        if type(value) is bytes:
            return pickle.loads(value)  # a fresh copy, several times faster than copy.deepcopy
        return value  # a screen verdict without a result, a yes or no: nothing the run could change

    def put(self, key: Tuple[str, str, bytes], what: str, value: Any) -> None:
        """Remember `value` as `what` of `key`; entries of the same path with other bytes go."""
        entry = self.entries.get(key)
        if entry is None:
            old = self._by_path.get(key[0])
            if old is not None:  # the file had other bytes (or sat in another package) before
                self.entries.pop(old, None)
            entry = self.entries[key] = {}
            self._by_path[key[0]] = key
        kind, colon, _ = what.partition(":")
        if colon:  # "pass2:<facts digest>", "held_calls0:<digest>", ...: only the latest facts are worth keeping
            for old in [w for w in entry if w.startswith(kind + ":") and w != what]:
                del entry[old]
        entry[what] = value if _plain(value) else pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        self.dirty = True

    def save(self) -> None:
        """Replace the bucket atomically (nothing happens when nothing changed or writing fails)."""
        if not self.dirty:
            return
        try:
            os.makedirs(self.folder, exist_ok=True)
            ignore = os.path.join(self.folder, ".gitignore")
            if not os.path.exists(ignore):
                with open(ignore, "w", encoding="utf-8") as fh:
                    fh.write("# Automatically created by apex2amp.\n*\n")
            fd, tmp = tempfile.mkstemp(prefix=".bucket-", suffix=".tmp", dir=self.folder)
            try:
                with os.fdopen(fd, "wb") as fh:
                    pickle.dump(self.entries, fh, protocol=pickle.HIGHEST_PROTOCOL)
                os.replace(tmp, self.bucket)
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError:
            pass
        self.dirty = False


def _plain(value: Any) -> bool:
    """A value kept as it is (nothing can change it): None, a yes or no, a tuple of small ints and None."""
    if value is None or type(value) is bool:
        return True
    return type(value) is tuple and all(v is None or type(v) is int for v in value)


def facts_digest(facts: Any) -> str:
    """A stable digest of the repo facts (pass 2 entries are valid for these facts only)."""
    norm = (sorted((k, sorted(v)) for k, v in facts.scaler_functions.items()),
            sorted(facts.scaler_params.items()), sorted((k, sorted(v.items())) for k, v in facts.scaler_slots.items()),
            sorted((str(k), repr(v)) for k, v in facts.spawn_entries.items()),
            sorted((str(k), repr(v)) for k, v in facts.extra.items()), sorted(facts.unmigrated_amp),
            sorted((k, sorted(v)) for k, v in facts.dropped_imports.items()),
            sorted((k, sorted(v.items())) for k, v in facts.reexports.items()),
            sorted(facts.scaler_bases.items()),
            [sorted((k, sorted(v)) for k, v in getattr(facts, t).items())
             for t in ("attr_candidates", "scaler_methods", "foreign_method_refs", "foreign_value_refs",
                       "held_callers")],
            sorted((k, sorted(v.items())) for k, v in facts.scaler_required.items()))
    return hashlib.blake2b(repr(norm).encode(), digest_size=16).hexdigest()
