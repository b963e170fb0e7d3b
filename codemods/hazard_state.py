"""What every fp16 hazard check shares for one file: its context, one finding per node at most, the
positions (resolved on first use), the enclosing autocast regions and the names holding a scaled loss.

The checks (codemods/hazard_*.py) extend this state; codemods/hazards.py walks the file with them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, List, Set, Tuple

import libcst as cst

from .base import FileContext
from .index import positions_of
from .walk import Visitor

if TYPE_CHECKING:
    from .hazard_text import FileText


class HazardState(Visitor):
    """The per-file state of the hazard checks; `_report` reports a node once, for an enabled,
    unsuppressed rule."""

    def __init__(self, ctx: FileContext, wrapper: cst.MetadataWrapper, autocast_file: bool, fp16_file: "FileText"):
        self.ctx = ctx
        self.wrapper = wrapper
        self._pos = None
        self.autocast_file = autocast_file
        self._text = fp16_file  # fp16_file (the file casts to fp16 by hand) is decided on first use
        self.autocast_depth: List[bool] = []  # enabled? per enclosing autocast `with`
        self.scaled_names: List[Set[str]] = [set()]
        self.functions: List[List[Tuple[int, str, cst.CSTNode]]] = [[]]  # events per function
        self.reported: Set[int] = set()

    def _report(self, node: cst.CSTNode, code: str, message: str) -> None:
        if id(node) in self.reported or not self.ctx.enabled(code) or self.ctx.suppressed(node, code):
            return
        self.reported.add(id(node))
        self.ctx.report(node, code, message)

    @property
    def fp16_file(self) -> bool:
        return self._text.fp16_casts

    @property
    def pos(self):
        """Positions, resolved on first use (most files record no clip-order events)."""
        if self._pos is None:
            self._pos = positions_of(self.wrapper.module)
        return self._pos

    def _line(self, node: cst.CSTNode) -> int:
        p = self.pos.get(node)
        return p.start.line * 10000 + p.start.column if p else 0
