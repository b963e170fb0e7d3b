"""apex state that exists only after `amp.initialize` ran and that the amp migration does not rewrite:
`_amp_state` reads other than `loss_scalers[i].loss_scale()` (`_amp_state.loss_scalers[0]._loss_scale =
2 ** 20`, `_amp_state.opt_properties`) and the attributes apex adds to the optimizer
(`optimizer._amp_stash`, `optimizer._lazy_init_maybe_master_weights()`). With `amp.initialize` gone they
raise (IndexError, AttributeError): the module's amp code must migrate together, by hand."""
from __future__ import annotations

from typing import Optional, Tuple

import libcst as cst

from .walk import iter_nodes

AMP_STATE = "apex.amp._amp_state"
OPTIMIZER_ATTRS = frozenset({"_amp_stash", "_lazy_init_maybe_master_weights", "_amp_lazy_init",
                             "_prepare_amp_backward", "_post_amp_backward"})


def _rewritten_scale_read(a, node: cst.CSTNode) -> bool:
    """`<node>.loss_scalers[i].loss_scale()`: the read the migration turns into `scaler.get_scale()`."""
    p1 = a.parent(node)
    p2 = a.parent(p1) if p1 is not None else None
    p3 = a.parent(p2) if p2 is not None else None
    p4 = a.parent(p3) if p3 is not None else None
    return isinstance(p1, cst.Attribute) and p1.attr.value == "loss_scalers" and \
        isinstance(p2, cst.Subscript) and isinstance(p3, cst.Attribute) and p3.attr.value == "loss_scale" and \
        isinstance(p4, cst.Call) and p4.func is p3


def private_state_use(a) -> Optional[Tuple[cst.CSTNode, str]]:
    """The first such use in `a`'s module (an amp `_Analysis`) and how it is spelled, or None."""
    names = a.index.attr_values | a.index.name_values
    if "_amp_state" not in names and not (OPTIMIZER_ATTRS & names):
        return None
    for n in iter_nodes(a.module):
        if type(n) is cst.Attribute and n.attr.value in OPTIMIZER_ATTRS:
            return n, f".{n.attr.value}"
        if type(n) is cst.Name and type(a.parent(n)) is cst.ImportAlias:
            continue  # `from apex.amp import _amp_state` itself
        if type(n) in (cst.Name, cst.Attribute) and (n.value if type(n) is cst.Name else n.attr.value) == "_amp_state":
            if any(q == AMP_STATE for q in a.table.qualified_names(n)) and not _rewritten_scale_read(a, n):
                return n, "_amp_state"
    return None
