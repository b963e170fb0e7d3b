"""apex amp held as an object under a name that does not say amp (A2A171, findings only).

Trainers take apex amp (or the apex module) as a constructor argument and keep it on `self`:
`Solver(model, apex=amp)`, then `self.apex.initialize(model, opt, opt_level="O1")` and
`with self.apex.scale_loss(loss, opt) as s: s.backward()`. Nothing there resolves to an apex import,
so no codemod migrates it. A receiver is taken for apex amp when the file shows one of apex amp's
own call shapes on it: `.initialize(...)` with `opt_level=`, or `with R.scale_loss(...) as s:` whose
body calls `s.backward()`. Every amp call on such a receiver is then reported; code is never changed.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Set

import libcst as cst

from .base import WARNING, FileContext, rule
from .index import ModuleIndex
from .names import ImportTable, dotted_name

AMP_OBJECT = rule(
    "A2A171", "apex-amp-held-as-object", "apex amp used through an object attribute or parameter",
    fixes=False, severity=WARNING,
    why="""
apex amp (or the apex module) reaches this code as an object, e.g. `Solver(model, apex=amp)` kept as
`self.apex`, so its calls resolve to no apex import and apex2amp cannot migrate them. The receiver is
taken for apex amp because it is called as only apex amp is (`initialize(..., opt_level=...)`, or
`with R.scale_loss(loss, opt) as s: s.backward()`). Migrate these calls by hand: drop the initialize
(keep the model and optimizer), make a `torch.amp.GradScaler("cuda")` in its place (e.g. `self.scaler`),
and replace the scaled backward by `self.scaler.scale(loss).backward()` with `self.scaler.step(opt)` and
`self.scaler.update()` after it; then stop passing amp in.""",
    before="""
self.model, opt = self.apex.initialize(self.model, opt, opt_level="O1")
with self.apex.scale_loss(loss, opt) as scaled_loss:
    scaled_loss.backward()""",
    after="""
self.scaler = torch.amp.GradScaler("cuda")
self.scaler.scale(loss).backward()""")

# the calls on an apex amp object that need migrating
AMP_METHODS = ("initialize", "scale_loss", "master_params", "state_dict", "load_state_dict")


def _method_call(call: cst.Call) -> Optional[tuple]:
    """(receiver spelling, method) of `a.b.method(...)` with a dotted receiver of two parts or more
    (`self.apex`, `trainer.amp_module`), or of a bare name; else None."""
    func = call.func
    if not isinstance(func, cst.Attribute):
        return None
    receiver = dotted_name(func.value)
    if receiver is None:
        return None
    return receiver, func.attr.value


def _has_opt_level(call: cst.Call) -> bool:
    return any(a.keyword is not None and a.keyword.value == "opt_level" for a in call.args)


def _scaled_backward(index: ModuleIndex, call: cst.Call) -> bool:
    """`with R.scale_loss(...) as s:` whose body calls `s.backward()`."""
    item = index.parent(call)
    if not isinstance(item, cst.WithItem) or item.asname is None or not isinstance(item.asname.name, cst.Name):
        return False
    with_node = index.parent(item)
    if not isinstance(with_node, cst.With):
        return False
    name = item.asname.name.value
    return any(isinstance(c.func, cst.Attribute) and c.func.attr.value == "backward"
               and dotted_name(c.func.value) == name for c in index.calls_in(with_node.body))


def report_amp_objects(index: ModuleIndex, table: ImportTable, ctx: FileContext,
                       other_packages: Sequence[str]) -> None:
    """A2A171 at each amp call on a receiver this file shows to be apex amp held as an object."""
    if not ctx.enabled(AMP_OBJECT.code):
        return
    sites: Dict[str, List[cst.Call]] = {}
    proven: Set[str] = set()
    for call in index.calls:
        found = _method_call(call)
        if found is None or found[1] not in AMP_METHODS:
            continue
        receiver, method = found
        if receiver.rpartition(".")[2].endswith("amp") and method in ("scale_loss", "master_params"):
            continue  # A2A125's
        if table.refers_under(call.func.value, "apex"):
            continue  # the amp codemod's own
        if any(q.partition(".")[0] in other_packages for q in table.qualify(receiver) if q != receiver):
            continue
        sites.setdefault(receiver, []).append(call)
        if (method == "initialize" and _has_opt_level(call)) or (method == "scale_loss" and _scaled_backward(index, call)):
            proven.add(receiver)
    for receiver in sorted(proven):
        for call in sites[receiver]:
            method = call.func.attr.value  # type: ignore[attr-defined]
            ctx.report(call, AMP_OBJECT.code,
                       f"`{receiver}.{method}(...)` is apex amp held as an object (`{receiver}` is called as only "
                       "apex amp is): apex2amp cannot migrate it; migrate it by hand to torch.amp.GradScaler "
                       f"(see `apex2amp explain {AMP_OBJECT.code}`) and stop passing amp in")
