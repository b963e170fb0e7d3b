"""Gradient clips the amp migration cannot place: a clip in a function of the module that neither
holds the `scale_loss`/optimizer step the migration edits nor steps an optimizer itself (a trainer's
`step()` that clips, then calls `self._step()` where `optimizer.step()` is). Its gradients are still
scaled after the migration, and no `unscale_` can be proven to come first."""
from __future__ import annotations

from typing import List, Sequence, Set

import libcst as cst

from .names import dotted_name
from .walk import iter_nodes


def _steps_itself(func: cst.FunctionDef) -> bool:
    """Whether `func` calls some `X.step()` of its own (its own loop, apex or not)."""
    return any(type(n) is cst.Call and type(n.func) is cst.Attribute and n.func.attr.value == "step"
               for n in iter_nodes(func))


def unseen_clips(a, clip_funcs: Sequence[str], edited: Set[int]) -> List[cst.Call]:
    """The clip calls of `a`'s module (an amp `_Analysis`) in functions outside `edited` (ids of the
    functions holding the migrated backward or steps) that step no optimizer themselves and are no
    clip wrapper named like a clip (whose call sites plan_clipping handles)."""
    out: List[cst.Call] = []

    def visit_Call(n: cst.Call) -> None:
        if (dotted_name(n.func) or "").split(".")[-1] not in clip_funcs:
            return
        func = a.func_of(n)
        if func is None or id(func) in edited or _steps_itself(func) or a.in_dropped(n):
            return
        if func.name.value in clip_funcs:
            return  # a clip wrapper (`def clip_grads(self, params)`): its calls are clips themselves
        out.append(n)

    a._replay(calls=visit_Call)
    return out
