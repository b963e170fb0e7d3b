"""Which files the fp16 hazard lint reads, from the module's tokens: mixed precision at all (autocast,
GradScaler, apex, `.half()`), autocast or a scaler, fp16 casts by hand.

`FileText` also gives the nodes the lint visits, in visiting order, from the shared index (one scan
finds both). manual_scaling asks it whether a module mentions fp16.
"""
from __future__ import annotations

import re
from typing import List, Optional, Set, Tuple

import libcst as cst

from .index import ModuleIndex
from .names import code_of

MIXED_PRECISION = re.compile(r"autocast|GradScaler|\bapex\b|\.half\(\)|float16|scale_loss")
AUTOCAST_OR_SCALER = re.compile(r"autocast|GradScaler|\bapex\b|scale_loss")
FP16_CASTS = re.compile(r"\.half\(\)|\.to\([^)]*(float16|torch\.half)")


class FileText:
    """The regex tests on the module's text, answered from its tokens when that is exact.

    Every letter of a module's text lies in one token: a name, a string, an f-string's text or a
    comment (keywords and numbers hold none of the words searched for), and two such tokens never touch
    without a non-word character between them. So a pattern made of words (and `\\b`) matches the text
    exactly when it matches one token. `.half()` and `.to(...float16...)` span tokens: outside strings
    and comments they start at a call `x.half()` / `x.to(...)`, and the `[^)]*` stops inside that
    call's own parentheses, so searching the code of those calls finds them. Only a string or comment
    holding `.to(` (whose match could run on past it) needs the (costly) full text.
    """

    def __init__(self, module: cst.Module, index: ModuleIndex):
        self.order, texts = scan_visits(index)  # the nodes the lint visits, in order; comment and f-string texts
        self.module = module
        self.index = index
        self._casts: Optional[List[str]] = None
        self.tokens: List[str] = sorted(index.name_values | index.attr_values)
        self.tokens += [s.value for s in index.strings]
        self.tokens += texts
        self._code: Optional[str] = None
        self._fp16: Optional[bool] = None

    @classmethod
    def of(cls, module: cst.Module) -> "FileText":
        """The (cached) text facts of `module`."""
        tables = ModuleIndex.of(module).tables
        text = tables.get("hazards.FileText")
        if text is None:
            text = tables["hazards.FileText"] = cls(module, ModuleIndex.of(module))
        return text  # type: ignore[return-value]

    def mentions_fp16(self) -> bool:
        """`".half()" in module.code or "float16" in module.code`"""
        return self._mentions("float16", ".half()") or any(".half()" in c for c in self._cast_calls())

    def _any(self, pattern: "re.Pattern[str]") -> bool:
        return any(pattern.search(t) for t in self.tokens)

    def _mentions(self, *words: str) -> bool:
        return any(w in t for t in self.tokens for w in words)

    def _text(self) -> str:
        if self._code is None:
            self._code = ModuleIndex.of(self.module).code
        return self._code

    def _cast_calls(self) -> List[str]:
        """The code of every `x.half(...)` / `x.to(...)` call."""
        if self._casts is None:
            self._casts = [code_of(c) for c in self.index.calls
                           if isinstance(c.func, cst.Attribute) and c.func.attr.value in ("half", "to")]
        return self._casts

    def mixed_precision(self) -> bool:
        """MIXED_PRECISION.search(module.code)"""
        if self._any(MIXED_PRECISION):
            return True
        return self._mentions("half") and any(".half()" in c for c in self._cast_calls())

    def autocast_or_scaler(self) -> bool:
        """AUTOCAST_OR_SCALER.search(module.code) (all its alternatives are words)"""
        return self._any(AUTOCAST_OR_SCALER)

    @property
    def fp16_casts(self) -> bool:
        """FP16_CASTS.search(module.code), computed on first use"""
        if self._fp16 is None:
            if self._any(FP16_CASTS):
                self._fp16 = True
            elif not self._mentions("half", "float16"):
                self._fp16 = False
            elif any(".to(" in t for t in self.tokens):
                self._fp16 = bool(FP16_CASTS.search(self._text()))
            else:
                self._fp16 = any(FP16_CASTS.search(c) for c in self._cast_calls())
        return self._fp16


VISITED = (cst.FunctionDef, cst.With, cst.Assign, cst.Call, cst.BinaryOperation)  # what the lint visits


def scan_visits(index: ModuleIndex) -> Tuple[List[cst.CSTNode], List[str]]:
    """(the nodes the lint visits, in visiting order; the texts of comments and f-string parts).

    The index's parent map was filled in visiting order, so the first time each parent shows up is
    the pre-order of the nodes that have children (all the node kinds the lint looks at, and the
    whitespace nodes that own comments).
    """
    seen: Set[int] = set()
    order: List[cst.CSTNode] = []
    texts: List[str] = []
    for node in index.parents.values():
        key = id(node)
        if key in seen:
            continue
        seen.add(key)
        kind = type(node)
        if kind in VISITED_SET:
            order.append(node)
        elif kind is cst.TrailingWhitespace or kind is cst.EmptyLine:
            if node.comment is not None:  # type: ignore[attr-defined]
                texts.append(node.comment.value)  # type: ignore[attr-defined]
        elif kind is cst.FormattedString:
            texts += [p.value for p in node.parts if isinstance(p, cst.FormattedStringText)]  # type: ignore
    return order, texts


VISITED_SET = frozenset(VISITED)
