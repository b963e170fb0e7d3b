"""The model's repeated block list, found in its class (`self.layers = nn.ModuleList([...])`), so
that each block gets its own `fully_shard`."""
from __future__ import annotations

from typing import List, Optional

import libcst as cst

from .fsdp2_state import Fsdp2State, all_nodes
from .names import assigned_names, code_of, dotted_name

CONTAINERS = ("torch.nn.ModuleList", "torch.nn.Sequential", "torch.nn.modules.container.ModuleList",
              "torch.nn.modules.container.Sequential")


class BlockSharding(Fsdp2State):
    """The per-block sharding step of the fsdp2 migration."""

    def _repeated_blocks(self, before: List[cst.CSTNode], model: str) -> Optional[str]:
        cls_name = None
        for s in before:
            if isinstance(s, cst.SimpleStatementLine) and isinstance(s.body[0], cst.Assign) and model in assigned_names(s):
                value = s.body[0].value
                while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) \
                        and value.func.attr.value in ("to", "cuda", "cpu", "half", "float", "bfloat16"):
                    value = value.func.value
                cls_name = value.func.value if isinstance(value, cst.Call) and isinstance(value.func, cst.Name) else None
        if cls_name is None:
            return None
        classes = [s for s in self.module.body if isinstance(s, cst.ClassDef) and s.name.value == cls_name]
        if len(classes) != 1:
            return None
        found = []
        for f in classes[0].body.body:
            if isinstance(f, cst.FunctionDef) and f.name.value == "__init__":
                for a in all_nodes(f, cst.Assign):
                    t = a.targets[0].target  # type: ignore[attr-defined]
                    v = a.value  # type: ignore[attr-defined]
                    if len(a.targets) == 1 and isinstance(t, cst.Attribute) and dotted_name(t.value) == "self" \
                            and isinstance(v, cst.Call) and self._refers(v.func, CONTAINERS) and _repeats(v):
                        found.append(t.attr.value)
        return found[0] if len(found) == 1 else None


def _repeats(call: cst.Call) -> bool:
    """A container call of repeated layers: a comprehension, or a list of calls to one callee."""
    if len(call.args) >= 2 and not any(a.star or a.keyword for a in call.args):  # nn.Sequential(Block(), Block())
        return all(isinstance(a.value, cst.Call) for a in call.args) and \
            len({code_of(a.value.func) for a in call.args}) == 1  # type: ignore[attr-defined]
    if len(call.args) != 1:
        return False
    v = call.args[0].value
    if isinstance(v, (cst.ListComp, cst.GeneratorExp)):
        return True
    if call.args[0].star and isinstance(v, (cst.ListComp, cst.GeneratorExp)):
        return True
    if isinstance(v, cst.List) and len(v.elements) >= 2 and all(isinstance(e.value, cst.Call) for e in v.elements):
        return len({code_of(e.value.func) for e in v.elements}) == 1  # type: ignore[attr-defined]
    return False
