"""Restores of a migrated apex fused optimizer's state (A2A324, findings only).

apex FusedAdam counts steps in each param group (`param_groups[i]["step"]`, apex/optimizers/fused_adam.py)
and keeps only `exp_avg`/`exp_avg_sq` per parameter; torch Adam/AdamW read `state[p]["step"]`, so
`load_state_dict` of a checkpoint written by apex raises `KeyError: 'step'`. apex FusedAdagrad keeps only
`sum` per parameter and no step at all; torch Adagrad fails the same way. The rewrite stays right for
new runs; each `load_state_dict` of such an optimizer in the file gets a finding saying how to convert.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import libcst as cst

from .base import WARNING, FileContext, rule
from .index import ModuleIndex
from .names import dotted_name

RESUME = rule(
    "A2A324", "fused-optimizer-resume", "restore of an optimizer migrated from apex FusedAdam/FusedAdagrad",
    fixes=False, severity=WARNING,
    why="""
apex FusedAdam keeps the step count in each param group (`group["step"]`) and only `exp_avg` and
`exp_avg_sq` per parameter; torch.optim.Adam/AdamW keep `state[p]["step"]` per parameter. apex
FusedAdagrad keeps only `sum` per parameter. Loading an optimizer state saved by apex into the migrated
torch optimizer raises `KeyError: 'step'`. New checkpoints load fine. Convert old ones once with
`apex2amp convert-checkpoint OLD.pt NEW.pt` (it moves each group's step into its parameters' state), or
do the same before `load_state_dict`.""",
    before="""
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0, fused=True)  # was FusedAdam
optimizer.load_state_dict(ckpt["optimizer"])  # KeyError: 'step' on an apex-era checkpoint""",
    after="""
sd = ckpt["optimizer"]
for group in sd["param_groups"]:
    step = group.pop("step", 0)
    for i in group["params"]:
        sd["state"].get(i, {}).setdefault("step", torch.tensor(float(step)))
optimizer.load_state_dict(sd)  # or convert the file once: apex2amp convert-checkpoint old.pt new.pt""")

APEX_LAYOUT = {
    "FusedAdam": "keeps 'step' in each param group, torch's Adam per parameter",
    "FusedAdagrad": "keeps no 'step', torch's Adagrad one per parameter",
}


def _bound_to(index: ModuleIndex, call: cst.Call) -> Optional[str]:
    """The dotted name a constructor call is assigned to (`optimizer = ...`, `self.opt = ...`)."""
    parent = index.parent(call)
    if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
        return dotted_name(parent.targets[0].target)
    if isinstance(parent, cst.AnnAssign):
        return dotted_name(parent.target)
    return None


def report_resume_sites(index: ModuleIndex, migrated: Sequence[Tuple[cst.Call, str, str]], ctx: FileContext) -> None:
    """A2A324 at each `X.load_state_dict(...)` where X holds an optimizer migrated from apex.

    `migrated`: (the apex constructor call, apex's class name, the torch class it became)."""
    if not migrated or not ctx.enabled(RESUME.code):
        return
    owners: List[Tuple[str, str, str, int]] = []
    for call, apex_class, torch_class in migrated:
        name = _bound_to(index, call)
        if name is not None:
            owners.append((name, apex_class, torch_class, ctx.line_of(call)))
    for call in index.calls:
        func = call.func
        if not isinstance(func, cst.Attribute) or func.attr.value != "load_state_dict":
            continue
        receiver = dotted_name(func.value)
        for name, apex_class, torch_class, line in owners:
            if receiver == name and not ctx.suppressed(call, RESUME.code):
                ctx.report(call, RESUME.code,
                           f"`{name}` was apex {apex_class} (line {line}), now torch.optim.{torch_class}: a state "
                           f"saved by apex {APEX_LAYOUT[apex_class]}, and this load raises KeyError: 'step'; "
                           "convert old checkpoints with `apex2amp convert-checkpoint OLD NEW`, or set "
                           "state['step'] = torch.tensor(float(group.get('step', 0))) for each param of each "
                           "group before loading")
                break
