"""Restores of a migrated apex fused optimizer's state (A2A324).

apex FusedAdam counts steps in each param group (`param_groups[i]["step"]`, apex/optimizers/fused_adam.py)
and keeps only `exp_avg`/`exp_avg_sq` per parameter; torch Adam/AdamW read `state[p]["step"]`, so
`load_state_dict` of a checkpoint written by apex raises `KeyError: 'step'`. apex FusedAdagrad keeps only
`sum` per parameter and no step at all; torch Adagrad fails the same way. Each `load_state_dict` of such
an optimizer in the file loads through `apex_fused_optimizer_state(...)`, a helper added to the module that
moves a group's step into its parameters' state (a state saved by torch passes unchanged), so old and new
checkpoints both resume; a load it cannot wrap (no single plain argument) gets the finding alone.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import libcst as cst

from .base import WARNING, FileContext, rule
from .index import ModuleIndex
from .names import dotted_name

HELPER = "apex_fused_optimizer_state"
HELPER_CODE = '''def apex_fused_optimizer_state(state_dict):
    """An optimizer state in torch.optim's layout: apex FusedAdam kept the step in each param group, FusedAdagrad
    none (nor lr_decay); torch keeps it per parameter. A state saved by torch passes unchanged."""
    for group in state_dict["param_groups"]:
        step = float(group.pop("step", 0))
        for i in group["params"]:
            entry = state_dict["state"].get(i)
            if entry is not None and "step" not in entry:
                if "sum" in entry:
                    group.setdefault("lr_decay", 0.0)
                    group.setdefault("initial_accumulator_value", 0.0)
                entry["step"] = torch.tensor(step)
    return state_dict
'''

RESUME = rule(
    "A2A324", "fused-optimizer-resume", "restore of an optimizer migrated from apex FusedAdam/FusedAdagrad",
    fixes=True, severity=WARNING,
    why="""
apex FusedAdam keeps the step count in each param group (`group["step"]`) and only `exp_avg` and
`exp_avg_sq` per parameter; torch.optim.Adam/AdamW keep `state[p]["step"]` per parameter. apex
FusedAdagrad keeps only `sum` per parameter. Loading an optimizer state saved by apex into the migrated
torch optimizer raises `KeyError: 'step'`. The load in this file goes through
`apex_fused_optimizer_state(...)`, added to the module: it moves each group's step into its parameters'
state and leaves a state saved by torch as it is, so checkpoints of both eras resume. A load elsewhere
(another module, a library) needs the same, or convert old files once with
`apex2amp convert-checkpoint OLD.pt NEW.pt`.""",
    before="""
import torch
from apex.optimizers import FusedAdam


def resume(model, path):
    optimizer = FusedAdam(model.parameters(), lr=1e-3)
    optimizer.load_state_dict(torch.load(path)["optimizer"])
    return optimizer""",
    after="\nimport torch\n\n\n" + HELPER_CODE + """

def resume(model, path):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0, fused=True)
    optimizer.load_state_dict(apex_fused_optimizer_state(torch.load(path)["optimizer"]))
    return optimizer""")

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


def plan_resume_sites(index: ModuleIndex, migrated: Sequence[Tuple[cst.Call, str, str]], ctx: FileContext,
                      plan) -> bool:
    """Each `X.load_state_dict(state)` where X holds an optimizer migrated from apex loads through the
    helper (A2A324, fixed), or gets the finding alone; True when the module needs the helper.

    `migrated`: (the apex constructor call, apex's class name, the torch class it became)."""
    if not migrated or not ctx.enabled(RESUME.code):
        return False
    owners: List[Tuple[str, str, str, int]] = []
    for call, apex_class, torch_class in migrated:
        name = _bound_to(index, call)
        if name is not None:
            owners.append((name, apex_class, torch_class, ctx.line_of(call)))
    needed = False
    for call in index.calls:
        func = call.func
        if not isinstance(func, cst.Attribute) or func.attr.value != "load_state_dict":
            continue
        receiver = dotted_name(func.value)
        for name, apex_class, torch_class, line in owners:
            if receiver != name or ctx.suppressed(call, RESUME.code):
                continue
            was = (f"`{name}` was apex {apex_class} (line {line}), now torch.optim.{torch_class}: a state saved by "
                   f"apex {APEX_LAYOUT[apex_class]}")
            arg = call.args[0] if len(call.args) == 1 else None
            if arg is not None and arg.keyword is None and not arg.star and HELPER not in index.name_values:
                plan.replace_node[arg.value] = cst.Call(func=cst.Name(HELPER), args=[cst.Arg(arg.value)])
                needed = True
                ctx.report(call, RESUME.code, f"{was}; it now loads through `{HELPER}(...)` (added to this module), "
                                              "which moves the step into each parameter's state, so apex-era and "
                                              "new checkpoints both resume", fixed=True)
            else:
                ctx.report(call, RESUME.code, f"{was}, and this load raises KeyError: 'step'; convert old "
                                              "checkpoints with `apex2amp convert-checkpoint OLD NEW`, or set "
                                              "state['step'] = torch.tensor(float(group.get('step', 0))) for each "
                                              "param of each group before loading")
            break
    return needed
