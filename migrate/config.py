"""`[tool.apex2amp]` in the scanned project's pyproject.toml, found by walking up from the paths."""
from __future__ import annotations

import os
from typing import Any, Dict, Optional, Sequence

KNOWN_KEYS = {"select", "ignore", "extend-ignore", "per-file-ignores", "exclude", "dtype", "min-torch"}


class ConfigError(ValueError):
    pass


def _toml_load(path: str) -> Dict[str, Any]:
    try:
        import tomllib  # type: ignore[import-not-found]
    except ModuleNotFoundError:  # Python < 3.11
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ModuleNotFoundError:
            return {}
    with open(path, "rb") as fh:
        try:
            return tomllib.load(fh)
        except Exception as e:
            raise ConfigError(f"{path}: invalid TOML: {e}") from None


def find_pyproject(paths: Sequence[str]) -> Optional[str]:
    start = os.path.abspath(paths[0] if paths else ".")
    cur = start if os.path.isdir(start) else os.path.dirname(start)
    while True:
        cand = os.path.join(cur, "pyproject.toml")
        if os.path.isfile(cand):
            return cand
        if os.path.isdir(os.path.join(cur, ".git")):
            return None
        nxt = os.path.dirname(cur)
        if nxt == cur:
            return None
        cur = nxt


def load_config(paths: Sequence[str], explicit: Optional[str] = None) -> Dict[str, Any]:
    """The `[tool.apex2amp]` table (keys with dashes), or {} when there is none."""
    path = explicit or find_pyproject(list(paths))
    if not path:
        return {}
    data = _toml_load(path)
    table = data.get("tool", {}).get("apex2amp", {})
    norm: Dict[str, Any] = {}
    for key, value in table.items():
        k = key.replace("_", "-")
        if k not in KNOWN_KEYS:
            raise ConfigError(f"{path}: unknown key {key!r} in [tool.apex2amp] (known: {', '.join(sorted(KNOWN_KEYS))})")
        norm[k] = value
    return norm
