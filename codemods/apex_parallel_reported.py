"""apex.parallel names with no torch twin, reported and left alone: LARC where codemods/apex_larc.py cannot
add its class (A2A220), Reducer (A2A221)
and the multiproc launcher (A2A223), each with the message saying what replaces it."""
from __future__ import annotations

from .base import WARNING, rule

REPORT_ONLY = {
    "apex.parallel.LARC": "A2A220",
    "apex.parallel.LARC.LARC": "A2A220",
    "apex.parallel.Reducer": "A2A221",
    "apex.parallel.distributed.Reducer": "A2A221",
    "apex.parallel.multiproc": "A2A223",
}

rule("A2A220", "apex-larc", "apex.parallel.LARC that cannot be migrated here (A2A225 adds it where it can)",
     fixes=False, severity=WARNING,
     why="""
LARC (layer-wise adaptive rate clipping) wraps an optimizer; torch has no such wrapper, but apex's class
is plain PyTorch, and A2A225 adds it to the file. It cannot where the file already binds `LARC` to
something else, imports apex's LARC inside a `try` (whose fallback would stay), or uses the module
apex.parallel.LARC itself: copy the class of apex 25.05 (apex/parallel/LARC.py, BSD 3-Clause) into your
project under a free name and import it in place of apex's, or keep apex <= 25.05 installed for it.""",
     before="""
import torch
from apex.parallel.LARC import LARC as ApexLARC

LARC = {"trust_coefficient": 0.001, "clip": False}


def wrap(optimizer):
    return ApexLARC(optimizer, **LARC)""",
     after="optimizer = ApexLARC(optimizer, **LARC)  # ApexLARC: apex's LARC copied to my_project/larc.py")

rule("A2A221", "apex-reducer", "apex.parallel.Reducer -> all_reduce by hand",
     fixes=False, severity=WARNING,
     why="""
apex's Reducer all-reduced and averaged gradients when .reduce() was called. Replace it with a loop of
torch.distributed.all_reduce over the gradients followed by a division by the world size, or with DDP.""",
     before="""
from apex.parallel import Reducer


def sync(model):
    reducer = Reducer(model)
    reducer.reduce()""",
     after="""
for p in model.parameters():
    if p.grad is not None:
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()""")

rule("A2A223", "apex-multiproc", "apex.parallel.multiproc launcher -> torchrun",
     fixes=False, severity=WARNING,
     why="""
`python -m apex.parallel.multiproc main.py` started one process per GPU and appended
`--world-size N --rank i` to each one's arguments. Launch with `torchrun --nproc_per_node=gpu main.py`
instead and read RANK / WORLD_SIZE / LOCAL_RANK from the environment.""",
     before="""
#!/bin/bash
python -m apex.parallel.multiproc main.py --epochs 90""",
     after="torchrun --standalone --nproc_per_node=gpu main.py --epochs 90")


RULES_MSG = {
    "A2A220": "apex.parallel.LARC has no torch equivalent: vendor the LARC class from apex 25.05 or keep apex "
              "<= 25.05 for it",
    "A2A221": "apex.parallel.Reducer: replace .reduce() with dist.all_reduce over the gradients divided by the "
              "world size, or use torch DDP",
    "A2A223": "apex.parallel.multiproc: launch with `torchrun --nproc_per_node=gpu SCRIPT` and read RANK / "
              "WORLD_SIZE / LOCAL_RANK from the environment",
}
