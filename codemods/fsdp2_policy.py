"""The MixedPrecisionPolicy's param_dtype, read from the file's autocast regions: their dtype (the
run's --dtype when they name none), switched off like them when a flag known at the wrap disables
them, float32 when the file has none."""
from __future__ import annotations

from typing import List, Set

import libcst as cst

from .fsdp2_state import Fsdp2State, Refuse, all_nodes
from .names import assigned_names, code_of, names_read


class PolicyPlanning(Fsdp2State):
    """The policy step of the fsdp2 migration."""

    def _param_dtype(self, call: cst.Call, scope: cst.CSTNode, before: List[cst.CSTNode]) -> str:
        dtypes: Set[str] = set()
        flags: Set[str] = set()
        flag_nodes: List[cst.BaseExpression] = []
        self._autocasts = self._calls_to(("torch.autocast", "torch.amp.autocast", "torch.amp.autocast_mode.autocast"))
        for ac in self._autocasts:
            for a in ac.args:
                if a.keyword is not None and a.keyword.value == "dtype":
                    dtypes.add(code_of(a.value))
                elif a.keyword is not None and a.keyword.value == "enabled":
                    if not (isinstance(a.value, cst.Name) and a.value.value == "True"):
                        flags.add(code_of(a.value))
                        flag_nodes.append(a.value)
                elif a.keyword is None and a is not ac.args[0]:
                    raise Refuse(ac, "A2A808", "autocast with positional options: the fsdp2 policy cannot be read")
        if not dtypes and not self._autocasts:
            # no autocast here: the forward may run under one elsewhere; full-precision parameters are right either way
            self.notes.append("no autocast in this file, so float32 parameters: set `param_dtype` to the autocast "
                              "dtype if the forward runs under one elsewhere")
            return "torch.float32"
        if not dtypes:
            dtypes.add("torch.bfloat16" if self.ctx.options.dtype == "bfloat16" else "torch.float16")
        if len(dtypes) > 1 or len(flags) > 1:
            raise Refuse(call, "A2A808", "several autocast dtypes or switches in this file: choose the "
                                          "MixedPrecisionPolicy by hand")
        dt = next(iter(dtypes))
        known = {"torch.float16", "torch.bfloat16", "torch.half"}
        if dt not in known:
            raise Refuse(call, "A2A808", f"autocast dtype `{dt}` is not a literal torch dtype: choose the policy by hand")
        if not flags:
            return dt
        flag = flag_nodes[0]
        bound = set()
        if isinstance(scope, cst.FunctionDef):
            bound |= {p.name.value for p in scope.params.params + scope.params.kwonly_params + scope.params.posonly_params}
        for s in before:
            bound |= assigned_names(s)
        for line in all_nodes(scope, cst.SimpleStatementLine):  # assigned anywhere in the scope before the wrap
            if self._before(line, call) and not self._inside_def(line, scope):
                bound |= {n.split(".")[0] for n in assigned_names(line)}
        bound |= {n for s in self.module.body for n in assigned_names(s)}
        if not names_read(flag) <= bound or any(isinstance(n, cst.Call) for n in all_nodes(flag, cst.Call)):
            raise Refuse(call, "A2A808", f"autocast is switched by `{code_of(flag)}`, which is not known at the wrap: "
                                          "choose the policy's param_dtype by hand")
        return f"{dt} if {code_of(flag)} else torch.float32"
