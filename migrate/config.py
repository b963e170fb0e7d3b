"""`[tool.apex2amp]` in the scanned project's pyproject.toml, found by walking up from the first path.

Like ruff, the closest pyproject.toml that has a `[tool.apex2amp]` table wins; the walk stops at the
repository top (a folder holding `.git`). Keys (dashes or underscores): select, ignore, extend-ignore,
per-file-ignores, exclude, dtype, min-torch, unsafe-fixes (bool: apply fixes that change numerics), and the `[tool.apex2amp.verify]` table (modes = ["", "--fp16"],
resume-args, save-args, resume-at: see migrate/verify/modes.py). Unknown keys and wrong types are errors naming the key.
Glob patterns with a `/` are relative to the folder of that pyproject.toml; patterns without one match
file names anywhere. Python 3.11+ reads TOML with `tomllib`; older Pythons with `tomli` (the same parser,
a dependency there).
"""
from __future__ import annotations

import glob
import os
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

KNOWN_KEYS = {"select", "ignore", "extend-ignore", "per-file-ignores", "exclude", "dtype", "min-torch", "verify", "target",
              "unsafe-fixes"}
VERIFY_KEYS = {"modes", "resume-args", "save-args", "resume-at"}
DTYPE_VALUES = ("float16", "bfloat16", "fp16", "bf16")
MIN_SUPPORTED_TORCH = (1, 10)


class ConfigError(ValueError):
    """A pyproject.toml that cannot be used: invalid TOML, unknown key, wrong value."""


# -- reading TOML ---------------------------------------------------------------------------------


def _toml_loads(text: str, path: str) -> Dict[str, Any]:
    """The TOML document `text`: `tomllib` on Python 3.11+, `tomli` (a dependency there) before."""
    try:
        import tomllib  # type: ignore[import-not-found]
    except ModuleNotFoundError:  # Python < 3.11
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ModuleNotFoundError:
            raise ConfigError(f"{path}: reading TOML on Python < 3.11 needs tomli (pip install tomli)") from None
    try:
        return tomllib.loads(text)
    except Exception as e:
        raise ConfigError(f"{path}: invalid TOML: {e}") from None


# -- finding and validating the table -------------------------------------------------------------


def _read_table(path: str) -> Optional[Dict[str, Any]]:
    """The `[tool.apex2amp]` table of one pyproject.toml (None when it has none)."""
    try:
        with open(path, "rb") as fh:
            text = fh.read().decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read: {e}") from None
    if "apex2amp" not in text:
        return None
    data = _toml_loads(text, path)
    tool = data.get("tool", {})
    if not isinstance(tool, dict) or "apex2amp" not in tool:
        return None
    table = tool["apex2amp"]
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.apex2amp] must be a table")
    return table


def find_pyproject(paths: Sequence[str]) -> Optional[str]:
    """The closest pyproject.toml with a `[tool.apex2amp]` table above the first path, up to the repo top."""
    start = os.path.abspath(paths[0] if paths else ".")
    cur = start if os.path.isdir(start) else os.path.dirname(start)
    while True:
        cand = os.path.join(cur, "pyproject.toml")
        if os.path.isfile(cand) and _read_table(cand) is not None:
            return cand
        if os.path.exists(os.path.join(cur, ".git")):
            return None
        nxt = os.path.dirname(cur)
        if nxt == cur:
            return None
        cur = nxt


def parse_version(text: str, where: str = "min-torch") -> Tuple[int, int]:
    """`"2.4"`, `"2.4.1"`, `"2.4.0+cu121"` -> (2, 4); errors name `where`."""
    m = re.fullmatch(r"\s*(\d+)(?:\.(\d+))?(?:\.\d+)?(?:[+.\-_a-zA-Z0-9]*)\s*", str(text))
    if not m:
        raise ConfigError(f"{where}: not a torch version: {text!r} (expected e.g. \"2.4\")")
    version = (int(m.group(1)), int(m.group(2) or 0))
    if version < MIN_SUPPORTED_TORCH:
        raise ConfigError(f"{where}: torch {version[0]}.{version[1]} is too old: native AMP needs torch >= "
                          f"{MIN_SUPPORTED_TORCH[0]}.{MIN_SUPPORTED_TORCH[1]}")
    return version


def _codes(value: Any, key: str, path: str) -> List[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{path}: [tool.apex2amp] {key} must be a list of rule codes (strings)")
    out: List[str] = []
    for v in value:
        out.extend(c.strip().upper() for c in v.split(",") if c.strip())
    return out


def _anchor(pattern: str, base: str) -> str:
    """Patterns with a `/` are relative to `base`: make them absolute; bare names stay name globs."""
    pattern = pattern.strip()
    if "/" not in pattern.rstrip("/") or os.path.isabs(pattern):
        return pattern
    p = pattern[2:] if pattern.startswith("./") else pattern
    return glob.escape(base.replace(os.sep, "/")).rstrip("/") + "/" + p.lstrip("/")


def _verify_table(value: Any, path: str) -> Dict[str, Any]:
    """`[tool.apex2amp.verify]`: modes (list of argument strings), resume-args/save-args (strings), resume-at."""
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: [tool.apex2amp.verify] must be a table")
    out: Dict[str, Any] = {}
    for key, v in value.items():
        k = key.replace("_", "-")
        if k not in VERIFY_KEYS:
            raise ConfigError(f"{path}: unknown key {key!r} in [tool.apex2amp.verify] "
                              f"(known: {', '.join(sorted(VERIFY_KEYS))})")
        if k == "modes" and not (isinstance(v, list) and all(isinstance(m, str) for m in v)):
            raise ConfigError(f"{path}: [tool.apex2amp.verify] modes must be a list of argument strings")
        if k in ("resume-args", "save-args") and not isinstance(v, str):
            raise ConfigError(f"{path}: [tool.apex2amp.verify] {k} must be a string")
        if k == "resume-at" and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise ConfigError(f"{path}: [tool.apex2amp.verify] resume-at must be a positive integer")
        out[k] = v
    return out


def validate(table: Dict[str, Any], path: str) -> Dict[str, Any]:
    """Normalised settings (dashed keys, upper-case codes, anchored globs) or ConfigError."""
    base = os.path.dirname(os.path.abspath(path))
    norm: Dict[str, Any] = {}
    for key, value in table.items():
        k = key.replace("_", "-")
        if k not in KNOWN_KEYS:
            raise ConfigError(f"{path}: unknown key {key!r} in [tool.apex2amp] "
                              f"(known: {', '.join(sorted(KNOWN_KEYS))})")
        if k in ("select", "ignore", "extend-ignore"):
            norm[k] = _codes(value, k, path)
        elif k == "exclude":
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{path}: [tool.apex2amp] exclude must be a list of glob strings")
            norm[k] = [_anchor(v, base) for v in value]
        elif k == "per-file-ignores":
            if not isinstance(value, dict):
                raise ConfigError(f"{path}: [tool.apex2amp] per-file-ignores must be a table of "
                                  "\"glob\" = [\"CODE\", ...]")
            norm[k] = {_anchor(pat, base): _codes(codes, f"per-file-ignores.{pat}", path)
                       for pat, codes in value.items()}
        elif k == "dtype":
            if value not in DTYPE_VALUES:
                raise ConfigError(f"{path}: [tool.apex2amp] dtype must be one of {', '.join(DTYPE_VALUES)}, "
                                  f"not {value!r}")
            norm[k] = value
        elif k == "min-torch":
            if not isinstance(value, str):
                raise ConfigError(f"{path}: [tool.apex2amp] min-torch must be a quoted version string such as "
                                  f"\"2.1\" (a bare number cannot tell 2.10 from 2.1), not {value!r}")
            parse_version(value, f"{path}: [tool.apex2amp] min-torch")
            norm[k] = value
        elif k == "verify":
            norm[k] = _verify_table(value, path)
        elif k == "target":
            if value not in ("ddp", "fsdp2"):
                raise ConfigError(f"{path}: [tool.apex2amp] target must be \"ddp\" or \"fsdp2\", not {value!r}")
            norm[k] = value
        elif k == "unsafe-fixes":
            if not isinstance(value, bool):
                raise ConfigError(f"{path}: [tool.apex2amp] unsafe-fixes must be true or false, not {value!r}")
            norm[k] = value
    norm["path"] = path
    return norm


def load_config(paths: Sequence[str], explicit: Optional[str] = None) -> Dict[str, Any]:
    """The validated `[tool.apex2amp]` settings (dashed keys; `path` = the file), or {} when there are none."""
    if explicit:
        if not os.path.isfile(explicit):
            raise ConfigError(f"{explicit}: no such configuration file")
        table = _read_table(explicit)
        return validate(table, explicit) if table is not None else {}
    path = find_pyproject(list(paths))
    if not path:
        return {}
    table = _read_table(path)
    return validate(table, path) if table is not None else {}
