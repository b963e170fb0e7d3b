"""libcst parsing without re-validating every node the native parser builds.

libcst validates each node in `CSTNode.__post_init__`, which is right for nodes a codemod builds and
(nearly always) redundant for the ones its parser builds: about 15% of `libcst.parse_module` with the
run's garbage-collector settings. `parse_module` here turns them off for the parse only; nodes built
afterwards, by the codemods, are validated as before.
"""
from __future__ import annotations

import threading

import libcst as cst

try:
    from libcst._nodes.base import CSTNode as _CSTNode
    _VALIDATING_INIT = _CSTNode.__dict__.get("__post_init__")
except ImportError:  # pragma: no cover - libcst moved its base class: parse the plain way
    _CSTNode = None
    _VALIDATING_INIT = None

_LOCK = threading.Lock()


def _trusted(self: object) -> None:
    """Stands in for node validation while the parser builds the tree."""


def parse_module(text: str) -> cst.Module:
    """`libcst.parse_module(text)` without the per-node validation pass: the same tree wherever
    validation passes. Where it would not (a few sources libcst's parser accepts but its nodes reject,
    such as `a if b else(lambda: c)`), the tree is returned anyway; the engine, should a codemod then
    fail on it, parses again the validating way to report the parse error."""
    if _VALIDATING_INIT is None:  # pragma: no cover - see the import above
        return cst.parse_module(text)
    with _LOCK:  # one parse at a time swaps the hook, so a second thread cannot restore the wrong one
        try:
            _CSTNode.__post_init__ = _trusted  # type: ignore[method-assign, union-attr]
            return cst.parse_module(text)
        finally:
            _CSTNode.__post_init__ = _VALIDATING_INIT  # type: ignore[method-assign, union-attr]
