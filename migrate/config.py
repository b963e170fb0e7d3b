"""`[tool.apex2amp]` in the scanned project's pyproject.toml, found by walking up from the first path.

Like ruff, the closest pyproject.toml that has a `[tool.apex2amp]` table wins; the walk stops at the
repository top (a folder holding `.git`). Keys (dashes or underscores): select, ignore, extend-ignore,
per-file-ignores, exclude, dtype, min-torch, unsafe-fixes (bool: apply fixes that change numerics), and the `[tool.apex2amp.verify]` table (modes = ["", "--fp16"],
resume-args, save-args, resume-at: see migrate/verify/modes.py). Unknown keys and wrong types are errors naming the key.
Glob patterns with a `/` are relative to the folder of that pyproject.toml; patterns without one match
file names anywhere. Python 3.11+ reads TOML with `tomllib`; older Pythons use `tomli` when installed and
otherwise the small reader below, which covers the TOML this table needs.
"""
from __future__ import annotations

import glob
import os
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

KNOWN_KEYS = {"select", "ignore", "extend-ignore", "per-file-ignores", "exclude", "dtype", "min-torch", "verify",
              "unsafe-fixes"}
VERIFY_KEYS = {"modes", "resume-args", "save-args", "resume-at"}
DTYPE_VALUES = ("float16", "bfloat16", "fp16", "bf16")
MIN_SUPPORTED_TORCH = (1, 10)


class ConfigError(ValueError):
    """A pyproject.toml that cannot be used: invalid TOML, unknown key, wrong value."""


# -- reading TOML ---------------------------------------------------------------------------------


def _toml_loads(text: str, path: str) -> Dict[str, Any]:
    try:
        import tomllib  # type: ignore[import-not-found]
    except ModuleNotFoundError:  # Python < 3.11
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ModuleNotFoundError:
            tomllib = None  # type: ignore[assignment]
    try:
        if tomllib is not None:
            return tomllib.loads(text)
        return MiniToml(text).parse()
    except Exception as e:
        raise ConfigError(f"{path}: invalid TOML: {e}") from None


class MiniToml:
    """A small TOML reader for Pythons without tomllib: tables, dotted/quoted keys, strings, numbers,
    booleans, arrays (multi-line) and inline tables. Not supported (raises): dates, array-of-tables."""

    _BARE = re.compile(r"[A-Za-z0-9_-]+")
    _NUM = re.compile(r"[+-]?(?:0x[0-9A-Fa-f_]+|0o[0-7_]+|0b[01_]+|[0-9_]+(?:\.[0-9_]+)?(?:[eE][+-]?[0-9_]+)?|inf|nan)")

    def __init__(self, text: str):
        self.s = text
        self.i = 0

    def parse(self) -> Dict[str, Any]:
        root: Dict[str, Any] = {}
        table = root
        while True:
            self._skip_ws_comments(newlines=True)
            if self.i >= len(self.s):
                return root
            if self.s.startswith("[[", self.i):
                raise ValueError(f"arrays of tables are not supported (line {self._line()})")
            if self.s[self.i] == "[":
                self.i += 1
                keys = self._key()
                self._expect("]")
                table = root
                for k in keys:
                    table = table.setdefault(k, {})
                    if not isinstance(table, dict):
                        raise ValueError(f"key {k!r} is not a table (line {self._line()})")
            else:
                keys = self._key()
                self._expect("=")
                value = self._value()
                self._set(table, keys, value)
            self._skip_ws_comments(newlines=False)
            if self.i < len(self.s) and self.s[self.i] not in "\r\n":
                raise ValueError(f"expected end of line (line {self._line()})")

    def _line(self) -> int:
        return self.s.count("\n", 0, self.i) + 1

    def _set(self, table: Dict[str, Any], keys: List[str], value: Any) -> None:
        for k in keys[:-1]:
            table = table.setdefault(k, {})
        if keys[-1] in table:
            raise ValueError(f"duplicate key {keys[-1]!r} (line {self._line()})")
        table[keys[-1]] = value

    def _skip_ws_comments(self, newlines: bool) -> None:
        while self.i < len(self.s):
            c = self.s[self.i]
            if c in " \t" or (newlines and c in "\r\n"):
                self.i += 1
            elif c == "#":
                while self.i < len(self.s) and self.s[self.i] != "\n":
                    self.i += 1
            else:
                return

    def _expect(self, ch: str) -> None:
        self._skip_ws_comments(newlines=False)
        if not self.s.startswith(ch, self.i):
            raise ValueError(f"expected {ch!r} (line {self._line()})")
        self.i += len(ch)

    def _key(self) -> List[str]:
        keys = []
        while True:
            self._skip_ws_comments(newlines=False)
            c = self.s[self.i:self.i + 1]
            if c in ("\"", "'"):
                keys.append(self._string())
            else:
                m = self._BARE.match(self.s, self.i)
                if not m:
                    raise ValueError(f"expected a key (line {self._line()})")
                keys.append(m.group(0))
                self.i = m.end()
            self._skip_ws_comments(newlines=False)
            if self.s.startswith(".", self.i):
                self.i += 1
                continue
            return keys

    def _string(self) -> str:
        s = self.s
        if s.startswith('"""', self.i) or s.startswith("'''", self.i):
            q = s[self.i:self.i + 3]
            end = s.find(q, self.i + 3)
            if end < 0:
                raise ValueError(f"unterminated string (line {self._line()})")
            body = s[self.i + 3:end]
            body = body[2:] if body.startswith("\r\n") else (body[1:] if body.startswith("\n") else body)
            self.i = end + 3
            return self._unescape(body) if q == '"""' else body
        q = s[self.i]
        j = self.i + 1
        out = []
        while j < len(s) and s[j] != q:
            if s[j] == "\n":
                raise ValueError(f"newline in string (line {self._line()})")
            if q == '"' and s[j] == "\\":
                out.append(s[j:j + 2])
                j += 2
                continue
            out.append(s[j])
            j += 1
        if j >= len(s):
            raise ValueError(f"unterminated string (line {self._line()})")
        self.i = j + 1
        body = "".join(out)
        return self._unescape(body) if q == '"' else body

    @staticmethod
    def _unescape(body: str) -> str:
        simple = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\"}

        def sub(m: "re.Match[str]") -> str:
            e = m.group(1)
            if e[0] in simple:
                return simple[e[0]]
            return chr(int(e[1:], 16))

        return re.sub(r"\\(u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|[btnfr\"\\])", sub, body)

    def _value(self) -> Any:
        self._skip_ws_comments(newlines=False)
        s = self.s
        c = s[self.i:self.i + 1]
        if c in ("\"", "'"):
            return self._string()
        if c == "[":
            self.i += 1
            items = []
            while True:
                self._skip_ws_comments(newlines=True)
                if s.startswith("]", self.i):
                    self.i += 1
                    return items
                items.append(self._value())
                self._skip_ws_comments(newlines=True)
                if s.startswith(",", self.i):
                    self.i += 1
                elif not s.startswith("]", self.i):
                    raise ValueError(f"expected ',' or ']' in array (line {self._line()})")
        if c == "{":
            self.i += 1
            table: Dict[str, Any] = {}
            self._skip_ws_comments(newlines=False)
            if s.startswith("}", self.i):
                self.i += 1
                return table
            while True:
                keys = self._key()
                self._expect("=")
                self._set(table, keys, self._value())
                self._skip_ws_comments(newlines=False)
                if s.startswith(",", self.i):
                    self.i += 1
                elif s.startswith("}", self.i):
                    self.i += 1
                    return table
                else:
                    raise ValueError(f"expected ',' or '}}' in inline table (line {self._line()})")
        for word, val in (("true", True), ("false", False)):
            if s.startswith(word, self.i):
                self.i += len(word)
                return val
        m = self._NUM.match(s, self.i)
        if m and m.group(0):
            self.i = m.end()
            t = m.group(0).replace("_", "")
            if t.lstrip("+-") in ("inf", "nan"):
                return float(t)
            if t.lstrip("+-")[:2] in ("0x", "0o", "0b"):
                return int(t, 0)
            return float(t) if any(ch in t for ch in ".eE") else int(t)
        raise ValueError(f"unsupported value (line {self._line()})")


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
