"""`with X.no_sync():` -> `X.set_requires_gradient_sync(False)` before the body and True after it."""
from __future__ import annotations

from typing import Optional, Set

import libcst as cst

from .fsdp2_state import Fsdp2State, Refuse, all_nodes
from .names import dotted_name


class NoSyncPlanning(Fsdp2State):
    """The gradient-sync step of the fsdp2 migration."""

    def _plan_no_sync(self, root: cst.CSTNode, names: Optional[Set[str]]) -> None:
        """`with X.no_sync():` -> gradient sync off for the body, on after it. `names`: the receivers
        allowed (the sharded model's names); None: any (another function of the file with the one wrap)."""
        for w in all_nodes(root, cst.With):
            for item in w.items:  # type: ignore[attr-defined]
                c = item.item
                if isinstance(c, cst.Call) and isinstance(c.func, cst.Attribute) and c.func.attr.value == "no_sync":
                    if id(w) in self.replace:
                        continue
                    obj = dotted_name(c.func.value)
                    if len(w.items) != 1 or item.asname is not None or c.args or obj is None or \
                            (names is not None and obj not in names):
                        raise Refuse(w, "A2A808", "`no_sync()` in a shape the fsdp2 target does not rewrite: use "
                                                   "`model.set_requires_gradient_sync(False)` by hand")
                    off = cst.parse_statement(f"{obj}.set_requires_gradient_sync(False)\n")
                    on = cst.parse_statement(f"{obj}.set_requires_gradient_sync(True)\n")
                    inner = list(w.body.body)  # type: ignore[attr-defined]
                    self.replace[id(w)] = cst.FlattenSentinel([off.with_changes(leading_lines=w.leading_lines),  # type: ignore
                                                               *inner, on])
                    self.fixed.append((w, "A2A805", f"`{obj}.no_sync()` -> `{obj}.set_requires_gradient_sync(False)` "
                                                    "for the accumulation backward, True after it"))
