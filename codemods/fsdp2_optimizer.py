"""The optimizer built before the DDP wrap moves after the sharding (it must see the sharded
parameters), with the statements that use it, when nothing in between changes what they read."""
from __future__ import annotations

from typing import List, Optional, Set

import libcst as cst

from .fsdp2_state import Fsdp2State, Refuse, all_nodes
from .names import assigned_names, names_read


class OptimizerMoves(Fsdp2State):
    """The optimizer step of the fsdp2 migration."""

    def _optimizer_names(self, scope: cst.CSTNode) -> List[str]:
        out = []
        for c in all_nodes(scope, cst.Call):
            if self._under(c.func, "torch.optim") and not self._under(c.func, "torch.optim.lr_scheduler"):  # type: ignore
                s = self._statement_of(c)
                if isinstance(s, cst.SimpleStatementLine) and isinstance(s.body[0], cst.Assign):
                    out.extend(n for n in assigned_names(s) if "." not in n)
        return out

    def _optimizer_moves(self, scope: cst.CSTNode, body: List[cst.CSTNode], at: int, model: str,
                         call: cst.Call) -> List[cst.CSTNode]:
        """The statements before the wrap that build (or use) the optimizer, moved after the sharding."""
        optim_calls = [c for c in all_nodes(scope, cst.Call)
                       if self._under(c.func, "torch.optim") and not self._under(c.func, "torch.optim.lr_scheduler")]  # type: ignore
        before_wrap = [c for c in optim_calls if self._before(c, call)]
        if not before_wrap:
            return []
        first: Optional[int] = None
        for c in before_wrap:
            s = self._statement_of(c)
            if s not in body[:at] or not (isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1
                                          and isinstance(s.body[0], cst.Assign)):
                raise Refuse(c, "A2A804", "optimizer built before the DDP wrap, not in the wrap's block: build it "
                                           "after `fully_shard` by hand")
            i = body.index(s)
            first = i if first is None else min(first, i)
        assert first is not None
        moving: List[cst.CSTNode] = []
        deps: Set[str] = set()
        for s in body[first:at]:
            is_opt = any(self._statement_of(c) is s for c in before_wrap)
            if is_opt or names_read(s) & deps:
                if not isinstance(s, (cst.SimpleStatementLine, cst.If)):  # a restore under `if args.resume:` moves too
                    raise Refuse(s, "A2A804", "the optimizer is used in a loop or other compound statement before "
                                               "the DDP wrap: build it after `fully_shard` by hand")
                moving.append(s)
                deps |= {n.split(".")[0] for n in assigned_names(s)}
        span = body[first:at]
        for i, s in enumerate(span):
            if s not in moving:
                continue
            # a statement that stays and comes after a moved one must not assign what the moved one reads or assigns
            later_assigned = {n.split(".")[0] for t in span[i + 1:] if t not in moving for n in assigned_names(t)}
            clash = (names_read(s) | {n.split(".")[0] for n in assigned_names(s)}) & later_assigned
            if clash:
                raise Refuse(s, "A2A804", f"moving the optimizer after the wrap would change `{sorted(clash)[0]}`, "
                                           "which the statements in between assign: build it after `fully_shard` "
                                           "by hand")
        return moving
