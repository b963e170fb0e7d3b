"""A cheaper `_parenthesize` for libcst's code generation: the same tokens, no generator.

Every expression libcst generates wraps its tokens in `with self._parenthesize(state):`, a
`contextlib.contextmanager` generator: creating, entering and leaving one costs more than most
nodes' own code generation (about a tenth of an index build, `codemods.index`). `install()` puts a
plain context manager with the same steps in its place: the left parentheses, the node's syntactic
position (`state.record_syntactic_position`, a no-op generator that is skipped for libcst's plain
state, which `module.code` uses), the body, the right parentheses (left out when the body raises,
as the generator leaves them out).

This replaces a private method of libcst (`_BaseParenthesizedNode._parenthesize`); when a libcst
lacks it, nothing is replaced. tests/test_index.py checks the generated code of every fixture
against the original method.
"""
from __future__ import annotations

from typing import Any, Optional, Set

try:
    from libcst._nodes.expression import _BaseParenthesizedNode
    from libcst._nodes.internal import CodegenState as _PlainState
    ORIGINAL: Any = _BaseParenthesizedNode.__dict__.get("_parenthesize")
except ImportError:  # pragma: no cover - a libcst without the private base class
    _BaseParenthesizedNode = _PlainState = None  # type: ignore[assignment,misc]
    ORIGINAL = None


# code generation states whose instances have `tokens` and `set_span(node, start, end)`, as
# codemods/index.py's has: a parenthesized node's span goes there directly, without a
# syntactic-position context manager of its own
_DIRECT_SPANS: Set[type] = set()


def record_spans_directly(state_class: type) -> None:
    """Let `state_class` take parenthesized nodes' spans through its `set_span`: the span its
    `record_syntactic_position(node)` would record, from the node's first token to its last."""
    _DIRECT_SPANS.add(state_class)


class _Parenthesized:
    __slots__ = ("node", "state", "position", "start")

    def __init__(self, node: Any, state: Any):
        self.node = node
        self.state = state
        self.position: Any = None
        self.start = -1

    def __enter__(self) -> None:
        state = self.state
        for lpar in self.node.lpar:
            lpar._codegen(state)
        kind = type(state)
        if kind in _DIRECT_SPANS:
            self.start = len(state.tokens)
        elif kind is not _PlainState:  # plain code generation (`module.code`) records no positions
            self.position = state.record_syntactic_position(self.node)
            self.position.__enter__()

    def __exit__(self, kind: Optional[type], value: Any, tb: Any) -> bool:
        state = self.state
        suppressed = False
        if self.start >= 0:
            state.set_span(self.node, self.start, len(state.tokens))
        elif self.position is not None:
            suppressed = bool(self.position.__exit__(kind, value, tb))
        if kind is None or suppressed:  # the generator goes on after its inner block only then
            for rpar in self.node.rpar:
                rpar._codegen(state)
        return suppressed


def _parenthesize(self: Any, state: Any) -> _Parenthesized:
    return _Parenthesized(self, state)


def install() -> bool:
    """Put the plain context manager in place (idempotent); False when this libcst has no such method.
    It stays for the process: the code and positions it generates are libcst's own."""
    if ORIGINAL is None or _BaseParenthesizedNode is None:
        return False
    _BaseParenthesizedNode._parenthesize = _parenthesize  # type: ignore[method-assign]
    return True


def uninstall() -> None:
    """Put libcst's own method back (for the test that compares the two)."""
    if ORIGINAL is not None and _BaseParenthesizedNode is not None:
        _BaseParenthesizedNode._parenthesize = ORIGINAL  # type: ignore[method-assign]
