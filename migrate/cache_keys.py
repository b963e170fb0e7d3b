"""What a run keys its result cache by (a file's place, module and bytes; the facts), and which results it keeps."""
from __future__ import annotations

import os
from typing import Any, Optional, Tuple

from codemods.base import RepoFacts

from . import apex_shadow, discovery
from .results import FileResult
from .settings import RunConfig


def open_cache(config: RunConfig) -> Any:
    """The cache bucket of this run's settings, or None without a cache folder."""
    if config.cache_dir is None:
        return None
    from .cache import ResultCache
    return ResultCache(config.cache_dir, config.settings_key())


def cache_key(d: discovery.Discovered, digest: bytes) -> Tuple[str, str, bytes]:
    """The cache key of a file with bytes of this digest: where it is, its module, its bytes."""
    module = discovery.module_name_for(d.path)[0] if d.kind == discovery.PYTHON else ""
    if module:
        module += apex_shadow.cache_marker(d.path, module)
    return f"{os.path.abspath(d.path)}\0{d.path}\0{d.root}", module, digest


def cacheable(fr: Optional[FileResult], key: Any) -> bool:
    """A result worth keeping: made from the bytes the key names, and not a passing failure
    (a read error, a crashed worker, an internal error)."""
    if key is None or fr is None or fr.source_digest != key[2]:
        return False
    return not fr.error or fr.error.startswith(("syntax error", "cannot parse"))


def facts_digest(facts: RepoFacts) -> str:
    from .cache import facts_digest
    return facts_digest(facts)
