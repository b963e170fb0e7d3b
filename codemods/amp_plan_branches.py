"""`if apex: ... elif native: ...` chains: the apex branches are dropped where a native-AMP branch stays (A2A111)."""
from __future__ import annotations

from typing import List, Optional, Set, Tuple

import libcst as cst

from . import amp_rules as R
from .amp_modes import ModeSwitches
from .walk import iter_nodes
from .names import dotted_name
from .amp_plan_state import AmpPlanState


NATIVE_AMP = ("torch.amp", "torch.cuda.amp", "torch.cpu.amp", "torch.autocast")
_NATIVE_NAMES = ("GradScaler", "autocast")
# a call of one of these on a name that says scaler marks a branch as the native-AMP path
_NATIVE_SCALER_METHODS = ("scale", "unscale_", "step", "update", "state_dict", "load_state_dict", "get_scale")


class NativeBranchPlanning(AmpPlanState):
    """The native-branch planning step of the amp analysis (codemods/amp.py)."""

    def _has_native(self, node: cst.CSTNode) -> bool:
        """Whether `node` uses native AMP: calls or names torch's autocast / GradScaler (also as a value,
        `amp_autocast = torch.cuda.amp.autocast`), a `NativeScaler` (timm and its forks), or a scaler's
        methods."""
        table = self.table
        for n in iter_nodes(node):
            t = type(n)
            if t is cst.Attribute or t is cst.Name:
                if any(q.startswith(NATIVE_AMP) or q.endswith(_NATIVE_NAMES) for q in table.qualified_names(n)):
                    return True
                continue
            if t is not cst.Call:
                continue
            f = n.func  # type: ignore[attr-defined]
            if (dotted_name(f) or "").rpartition(".")[2].startswith("NativeScaler"):
                return True
            if isinstance(f, cst.Attribute) and f.attr.value in _NATIVE_SCALER_METHODS and \
                    "scaler" in (dotted_name(f.value) or "").lower():
                return True
        return False

    def drop_apex_branches(self) -> None:
        """In `if apex: ... elif native: ...` chains, drop the apex branches (A2A111) where the apex
        choice keeps a mixed-precision path (codemods/amp_modes.py)."""
        handled: Set[int] = set()
        modes = ModeSwitches(self)
        for site in self.sites:
            chain_top, branches = self._if_chain(site.call)
            if chain_top is None or id(chain_top) in handled:
                continue
            apex_branches = [b for b in branches if self._branch_has_apex(b[1])]
            native = [b for b in branches if self._has_native(b[1]) and b not in apex_branches]
            if not apex_branches or not native:
                continue
            handled.add(id(chain_top))
            if not modes.allow(chain_top, apex_branches, native):
                continue
            keep = [b for b in branches if b not in apex_branches]
            self.plan.replace_stmt[chain_top] = self._rebuild_chain(chain_top, keep)
            for b in apex_branches:
                self.dropped.append(b[1])
            tests = [b[0] for b in apex_branches if b[0] is not None]
            if id(chain_top) in modes.rerouted:
                self.report(chain_top, R.APEX_BRANCH, "apex branch removed; the native-AMP branch stays, and the "
                                                      "apex choice now selects it (A2A130)", fixed=True)
            elif any(b[0] is None for b in keep) or not tests:
                self.report(chain_top, R.APEX_BRANCH, "apex branch removed; the native-AMP branch stays (select it "
                                                      "instead of apex)", fixed=True)
            else:
                chosen = self.module.code_for_node(tests[0]).strip()
                self.report(chain_top, R.APEX_BRANCH, f"apex branch removed and no `else` remains: where `{chosen}` "
                                                      "held, none of this chain runs now; select the native setting "
                                                      "instead (make it the default)")

    def _branch_has_apex(self, body: cst.CSTNode) -> bool:
        return any(self.index.contains(body, s.call) for s in self.sites)

    def _if_chain(self, node: cst.CSTNode) -> Tuple[Optional[cst.If], List[Tuple[Optional[cst.BaseExpression], cst.CSTNode]]]:
        """The outermost if/elif chain whose branch body holds `node`, with its (test, body) branches."""
        cur = self.parent(node)
        found: Optional[cst.If] = None
        while cur is not None and not isinstance(cur, (cst.FunctionDef, cst.ClassDef, cst.Module)):
            if isinstance(cur, cst.If):
                found = self.chain_top(cur)
                break
            cur = self.parent(cur)
        if found is None:
            return None, []
        branches: List[Tuple[Optional[cst.BaseExpression], cst.CSTNode]] = []
        n: Optional[cst.CSTNode] = found
        while isinstance(n, cst.If):
            branches.append((n.test, n.body))
            n = n.orelse
        if isinstance(n, cst.Else):
            branches.append((None, n.body))
        return found, branches

    def _rebuild_chain(self, top: cst.If, keep: List[Tuple[Optional[cst.BaseExpression], cst.CSTNode]]
                       ) -> List[cst.BaseStatement]:
        conds = [b for b in keep if b[0] is not None]
        els = [b for b in keep if b[0] is None]
        if not conds:
            if not els:
                return []
            body = els[0][1]
            stmts = list(body.body) if isinstance(body, cst.IndentedBlock) else [
                cst.SimpleStatementLine(body=list(body.body))]  # type: ignore[attr-defined]
            return stmts  # type: ignore[return-value]
        orelse: Optional[cst.CSTNode] = cst.Else(body=els[0][1]) if els else None  # type: ignore[arg-type]
        for test, body in reversed(conds[1:]):
            orelse = cst.If(test=test, body=body, orelse=orelse)  # type: ignore[arg-type]
        return [top.with_changes(test=conds[0][0], body=conds[0][1], orelse=orelse)]
