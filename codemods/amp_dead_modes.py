"""Apex branches of a backend switch whose apex value only the removed apex branch could set (A2A417).

A trainer with a torch-version gate picks its backend once and keeps it on the object:

    if fp16 and version.parse(torch.__version__) >= version.parse("1.6"):
        self.scaler = torch.cuda.amp.GradScaler(); self.backend = "native"
    elif fp16 and has_apex:
        self.model, self.optimizer = amp.initialize(...); self.backend = "apex"

and its methods test it (`if self.backend == "apex": <apex backward> else: loss.backward()`). Once the
apex branch of the gate goes (the native branch runs in its place, codemods/version_gates.py), nothing
sets `self.backend = "apex"` any more, so every `self.backend == "apex"` branch is dead: it goes, and the
other branches stay as they are (the native one uses the scaler on `self`, the fp32 one its plain
backward). This holds only when every assignment of the selector's attribute in the module is a string
literal and each one of the apex value lies in a removed branch.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import libcst as cst

from .names import dotted_name, literal_string


def drop_unselectable_apex_branches(a, rule_) -> None:
    """Remove the apex branches of `if S == "apex"` chains when only removed code set S to that value."""
    handled = set()
    for site in a.sites:
        if a.in_dropped(site.call):
            continue
        top, branches = a._if_chain(site.call)
        if top is None or id(top) in handled:
            continue
        apex = [b for b in branches if a._branch_has_apex(b[1])]
        if not apex or len(apex) == len(branches):
            continue
        selectors = [_selector(b[0]) for b in apex]
        if any(s is None for s in selectors):
            continue
        if not all(_only_removed_code_sets(a, attr, value) for attr, value in selectors):  # type: ignore[misc]
            continue
        handled.add(id(top))
        keep = [b for b in branches if b not in apex]
        a.plan.replace_stmt[top] = a._rebuild_chain(top, keep)
        for b in apex:
            a.dropped.append(b[1])
        attr, value = selectors[0]  # type: ignore[misc]
        a.report(top, rule_, f"`{attr} == {value!r}` can no longer hold (only the removed apex branch set it): "
                             "its apex branch is removed, the other branches stay", fixed=True)


def _selector(test: Optional[cst.BaseExpression]) -> Optional[Tuple[str, str]]:
    """("self.backend", "apex") for `self.backend == "apex"`."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1 or \
            not isinstance(test.comparisons[0].operator, cst.Equal):
        return None
    left, right = test.left, test.comparisons[0].comparator
    value = literal_string(right) if isinstance(right, cst.SimpleString) else None
    name = dotted_name(left)
    if value is None or not name or not name.startswith("self.") or name.count(".") != 1:
        return None
    return name, value


def _only_removed_code_sets(a, selector: str, value: str) -> bool:
    """Every assignment of the attribute (`x.backend = ...`, any receiver) is a string literal, at least
    one sets `value`, and each of those lies in a removed branch."""
    attr = selector.split(".", 1)[1]
    setters: List[cst.Assign] = []
    for node in a.index.nodes:
        t = type(node)
        if t in (cst.AugAssign, cst.AnnAssign) and isinstance(node.target, cst.Attribute) and \
                node.target.attr.value == attr:
            return False
        if t is not cst.Assign:
            continue
        for target in node.targets:
            tt = target.target
            elements = [e.value for e in tt.elements] if isinstance(tt, (cst.Tuple, cst.List)) else [tt]
            for e in elements:
                if isinstance(e, cst.Attribute) and e.attr.value == attr:
                    if e is not tt or len(node.targets) != 1 or not isinstance(node.value, cst.SimpleString):
                        return False
                    if literal_string(node.value) == value:
                        setters.append(node)
    if any(type(n) is cst.Call and (dotted_name(n.func) or "") in ("setattr", "vars") for n in a.index.nodes):
        return False
    return bool(setters) and all(a.in_dropped(s) for s in setters)
