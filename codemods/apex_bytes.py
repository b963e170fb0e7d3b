"""Byte-level tests for apex imports, shared by the prefilter and the codemods' own second stages.

Names are resolved through imports (codemods/names.py ImportTable), so a file with no import of apex
cannot hold a name that resolves under `apex.`: the word alone (a URL, a comment, a `has_apex` flag)
is not enough.
"""
from __future__ import annotations

import functools
import re

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


def may_import_apex(data: bytes, module_name: str = "") -> bool:
    """Whether a module with these bytes may bind a name under `apex` through an import: one of its
    imports names apex, or the module is itself inside apex (a vendored copy imports relatively)."""
    if module_name == "apex" or module_name.startswith("apex."):
        return True
    return has_apex_import(data)


@functools.lru_cache(maxsize=64)  # amp, apex_modules, apex_parallel and imports ask about the same bytes
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
