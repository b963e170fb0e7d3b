"""What a run keys its result cache by (a file's place, module and bytes; the facts), and which results it keeps."""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from codemods.base import RepoFacts
from codemods.records import module_root

from . import apex_shadow, discovery
from .results import FileResult
from .settings import RunConfig


def open_cache(config: RunConfig) -> Any:
    """The cache bucket of this run's settings, or None without a cache folder."""
    _MARKERS.clear()  # local apex.py files may have come or gone since the last run
    if config.cache_dir is None:
        return None
    from .cache import ResultCache
    return ResultCache(config.cache_dir, config.settings_key())


def cache_key(d: discovery.Discovered, digest: bytes) -> Tuple[str, str, bytes]:
    """The cache key of a file with bytes of this digest: where it is, its module, its bytes."""
    module = discovery.module_name_for(d.path)[0] if d.kind == discovery.PYTHON else ""
    if module:
        module += _marker(d.path, module)
    return f"{os.path.abspath(d.path)}\0{d.path}\0{d.root}", module, digest


_MARKERS: Dict[str, str] = {}  # folder -> the apex marker of each of its modules, where it is the same for all


def _marker(path: str, module: str) -> str:
    """apex_shadow.cache_marker(path, module), worked out once per folder: the files of a folder share
    their import root, and so their marker, unless a package folder between holds an apex.py (then
    the marker names whether the file is reached from that folder's scripts, and is the file's own)."""
    folder = os.path.dirname(os.path.abspath(path))
    hit = _MARKERS.get(folder)
    if hit is not None:
        return hit
    marker = apex_shadow.cache_marker(path, module)
    if marker in ("", f"\0apex={module_root(path, module)}"):  # nothing of the file's own in it
        _MARKERS[folder] = marker
    return marker


def cacheable(fr: Optional[FileResult], key: Any) -> bool:
    """A result worth keeping: made from the bytes the key names, and not a passing failure
    (a read error, a crashed worker, an internal error)."""
    if key is None or fr is None or fr.source_digest != key[2]:
        return False
    return not fr.error or fr.error.startswith(("syntax error", "cannot parse"))


def facts_digest(facts: RepoFacts) -> str:
    from .cache import facts_digest
    return facts_digest(facts)


class PassMemo:
    """One cross-module pass's answer for each file, kept in the result cache under the file's key and
    `what:<digest of context>` (what the pass was told: the facts, the functions it looks for), so a
    re-run over unchanged files does not parse or rewrite them again. Only the latest context of each
    `what` is kept. An answer is used only for the bytes the key names (`data`: the bytes the pass
    reads; a file changed since the screen is worked out afresh)."""

    def __init__(self, cache: Any, keys: Sequence[Any], what: str, context: str):
        import hashlib
        self.cache = cache
        self.keys = keys
        self.what = f"{what}:{hashlib.blake2b(context.encode(), digest_size=16).hexdigest()}"

    def _key(self, j: int, data: bytes) -> Any:
        key = self.keys[j] if self.cache is not None and j < len(self.keys) else None
        if key is None:
            return None
        from .cache import digest
        return key if digest(data) == key[2] else None

    def get(self, j: int, data: bytes) -> Any:
        """The answer kept for file j (whose bytes are `data`), or None."""
        key = self._key(j, data)
        return None if key is None else self.cache.get(key, self.what)

    def put(self, j: int, data: bytes, value: Any) -> None:
        key = self._key(j, data)
        if key is not None:
            self.cache.put(key, self.what, value)


class FinalTexts:
    """The text each file has at the end of a run (its new text, else its bytes), for the passes over
    the run's results (migrate/half_outside.py), and their per-file answers kept in the result cache:
    a file the run leaves as it is is answered under its key (the bytes the screen read and kept, so
    a warm run reads nothing again), a rewritten one under a digest of its new text."""

    def __init__(self, files: Sequence[Any] = (), keys: Sequence[Any] = (), kept: Any = None, cache: Any = None):
        self.files = files
        self.keys = keys
        self.kept = kept if kept is not None else {}
        self.cache = cache

    def real_path(self, i: int, fr: FileResult) -> str:
        """os.path.realpath of the file (what the walk learned of it, when it did)."""
        real = self.files[i].real if i < len(self.files) else ""
        return real or os.path.realpath(fr.path)

    def _bytes(self, i: int, fr: FileResult) -> Tuple[Optional[bytes], bool]:
        """The file's bytes and whether they are those its key names."""
        data = self.kept.get(i)
        if data is not None:
            return data, True
        from .fileio import SourceError, read_bytes
        try:
            data = read_bytes(fr.path)
        except SourceError:
            return None, False
        key = self.keys[i] if i < len(self.keys) else None
        if key is None:
            return data, False
        from .cache import digest
        return data, digest(data) == key[2]

    def text(self, i: int, fr: FileResult) -> Optional[str]:
        """The file's text at the end of the run (None: unreadable)."""
        text = fr.new_text if fr.changed else fr.old_text
        if text:
            return text
        data, _ = self._bytes(i, fr)
        return None if data is None else data.decode("utf-8", "replace")

    def answer(self, i: int, fr: FileResult, what: str, compute: Callable[[Optional[str]], Any]) -> Any:
        """compute(the file's final text), kept in the cache as `what` of the file."""
        key = self.keys[i] if self.cache is not None and i < len(self.keys) else None
        text = fr.new_text if fr.changed else fr.old_text
        data = None
        if key is not None and text:
            from .cache import digest
            what = f"{what}_text:{digest(text.encode('utf-8', 'surrogatepass')).hex()}"
        elif key is not None:
            data, valid = self._bytes(i, fr)
            key = key if valid else None
        if key is not None:
            hit = self.cache.get(key, what)
            if hit is not None:
                return hit[0]
        if not text:
            text = self.text(i, fr) if data is None else data.decode("utf-8", "replace")
        value = compute(text)
        if key is not None:
            self.cache.put(key, what, (value,))
        return value
