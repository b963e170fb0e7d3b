"""The ordered list of codemods a run applies, and the union of their prefilters.

Order matters: API rewrites first, then launch changes, then apex import removal (which only drops
imports the earlier rewrites left unused), then the hazard lint on the migrated code.
"""
from __future__ import annotations

import re
from typing import List

from . import amp, amp_unresolved, apex_modules, apex_parallel, cuda_amp, hazards, imports, launch, manual_scaling
from .base import Codemod


def all_codemods() -> List[Codemod]:
    return [
        cuda_amp.DeprecatedCudaAmpToTorchAmp(),
        amp.ApexAmpToTorchAmp(),
        amp_unresolved.UnresolvedAmpApi(),
        apex_modules.ApexModulesToTorch(),
        manual_scaling.ManualLossScalingToGradScaler(),
        apex_parallel.ApexParallelToTorchDDP(),
        launch.SpawnToTorchrun(),
        imports.RemoveApexImports(),
        hazards.Fp16HazardLint(),
    ]


CODEMODS: List[Codemod] = all_codemods()

# Cheap first stage: a file none of these byte strings occur in cannot need any codemod.
PREFILTER = re.compile(
    rb"apex|cuda\.amp|cpu\.amp|torch\.(?:cuda|cpu) import amp|\bspawn\b|start_processes|distributed\.launch|local_rank|local-rank|"
    rb"init_process_group|MASTER_ADDR|MASTER_PORT|\.half\(\)|float16|loss_scale|masked_fill|"
    rb"BCELoss|binary_cross_entropy|scale_loss|master_params|[-]1e\d|float\(.-inf.\)|(?i:loss_?scal)|scaled_loss|FP16_Optimizer|fp16_utils|autocast|GradScaler"
)


def may_need_work(data: bytes) -> bool:
    """True when some codemod might apply to a file with these bytes."""
    return PREFILTER.search(data) is not None
