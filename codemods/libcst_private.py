"""The only place apex2amp reaches into libcst's private internals, and its public-API fallback.

Two private pieces are used, both read-only (nothing of libcst is replaced or patched):

- `CodegenState` and `node._codegen(state)`: code generation with per-node hooks, which lets the
  shared index (`codemods.index`) record parents, kinds and positions during the one code
  generation of a module that also gives its text.
- `node._is_removable()`: whether libcst's own visit drops a statement from a body
  (`codemods.edits`).

They are used only on a libcst version they were checked against (`KNOWN_VERSIONS`) and only when
the environment does not set `APEX2AMP_PUBLIC_LIBCST=1`; otherwise `PRIVATE` is False and the
callers take the public route (a visitor walk and libcst's PositionProvider; the public node
classes), which gives the same results, more slowly.
"""
from __future__ import annotations

import os
from typing import Any, Optional

import libcst as cst

# libcst major.minor versions whose private codegen state and hooks were checked
KNOWN_VERSIONS = ("1.0", "1.1", "1.2", "1.3", "1.4", "1.5", "1.6", "1.7", "1.8", "1.9")


def _installed_version() -> str:
    try:
        from importlib.metadata import version
        return version("libcst")
    except Exception:  # pragma: no cover - metadata missing (a vendored libcst)
        return ""


def _private_codegen_state() -> Optional[type]:
    if os.environ.get("APEX2AMP_PUBLIC_LIBCST") == "1":
        return None
    if ".".join(_installed_version().split(".")[:2]) not in KNOWN_VERSIONS:
        return None
    try:
        from libcst._nodes.internal import CodegenState
    except ImportError:  # pragma: no cover - the private module moved
        return None
    hooks = ("before_codegen", "after_codegen", "record_syntactic_position", "pop_trailing_newline")
    if not all(hasattr(CodegenState, h) for h in hooks) or not hasattr(cst.CSTNode, "_codegen") \
            or not hasattr(cst.CSTNode, "_is_removable"):
        return None  # pragma: no cover
    return CodegenState


# libcst's code generation state class, or None on the public route
CodegenState: Optional[type] = _private_codegen_state()
PRIVATE = CodegenState is not None


def generate(node: cst.CSTNode, state: Any) -> None:
    """Generate `node`'s code into `state` (an instance of a `CodegenState` subclass)."""
    node._codegen(state)


def is_removable(node: cst.CSTNode) -> bool:
    """Whether libcst's visit drops `node` from a body: a statement line left without statements."""
    if PRIVATE:
        return node._is_removable()
    return isinstance(node, cst.SimpleStatementLine) and not node.body
