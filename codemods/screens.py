"""What the byte screen reads of each codemod, importable without libcst.

A codemod is screened from a file's bytes before anything is parsed (`migrate/prefilter.py`): its
PREFILTER tokens first, then its own exact second stage (`wants`), or a refinement of noisy tokens
that the prefilter keeps by codemod name. Those parts live here, one `Screen` per codemod in the
registry's order, and each codemod class takes its tokens and second stage from its screen. So the
scout (`migrate/scout.py`), which screens a tree while the main process is still importing libcst,
applies the very same screen; tests/test_scout.py checks that this list matches the registry.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

from .apex_extension_names import APEX_EXTENSIONS
from .hazard_bytes import may_have_hazard
from .scaling_bytes import may_scale_by_hand


@dataclass(frozen=True)
class Screen:
    """The screening part of one codemod: its NAME, its PREFILTER tokens (a file holding none of them
    cannot interest it) and, when it has one, `wants(data, module_name)`, its exact second stage."""

    NAME: str
    PREFILTER: Tuple[bytes, ...]
    wants: Optional[Callable[..., bool]] = None


_UNRESOLVED_AMP_CALL = re.compile(rb"amp\s*\.\s*(?:scale_loss|master_params)\s*\(")
# apex amp held as an object under any name (codemods/amp_object.py): `.scale_loss(` or an `opt_level=`
_AMP_OBJECT_CALL = re.compile(rb"\.\s*scale_loss\s*\(|\bopt_level\s*=")


def _calls_amp_only_api(data: bytes, module_name: str = "") -> bool:
    """The call shape itself: a receiver whose name ends in `amp`, then `.scale_loss(` or `.master_params(`;
    or `.scale_loss(` / `opt_level=` on any receiver (A2A171)."""
    return _UNRESOLVED_AMP_CALL.search(data) is not None or _AMP_OBJECT_CALL.search(data) is not None


# a `def` whose parameters name a scaler (`scaler`, `grad_scaler`, `: GradScaler`)
_SCALER_DEF = re.compile(rb"\bdef\s+\w+\s*\([^)]*?[Ss]caler", re.S)


def _defines_scaler_parameter(data: bytes, module_name: str = "") -> bool:
    """A function definition with a scaler among its parameters (the A2A701 lint's own definitions;
    callers elsewhere reach it through the published facts)."""
    return _SCALER_DEF.search(data) is not None


def _may_have_hazard(data: bytes, module_name: str = "") -> bool:
    """`hazard_bytes.may_have_hazard` (which reads no module name)."""
    return may_have_hazard(data)


CUDA_AMP = Screen("cuda_amp", (b"cuda.amp", b"cpu.amp", b"torch.cuda import amp", b"torch.cpu import amp"))
AMP = Screen("amp", (b"apex", b"scaler"))
AMP_UNRESOLVED = Screen("amp_unresolved", (b"scale_loss", b"master_params", b"opt_level"), _calls_amp_only_api)
APEX_MODULES = Screen("apex_modules", (b"apex",))
MANUAL_SCALING = Screen("manual_scaling", (b"FP16_Optimizer", b"fp16_utils", b".backward(", b"network_to_half"),
                        may_scale_by_hand)
APEX_PARALLEL = Screen("apex_parallel", (b"apex",))
LAUNCH = Screen("launch", (b"spawn", b"local_rank", b"local-rank", b"start_processes"))
LAUNCH_LINES = Screen("launch_lines", (b"torch.distributed.launch",))  # launch commands built in code
# apex's extensions (`import amp_C`) need apex too (A2A172), in files that may not name apex
IMPORTS = Screen("imports", (b"apex",) + tuple(sorted(n.encode() for n in APEX_EXTENSIONS)))
_CKPT_LINT_SHAPE = re.compile(rb"scaler\s*\.\s*(?:load_)?state_dict\s*\(|\bamp\s*[,)]")


def _may_lint_checkpoint(data: bytes, module_name: str = "") -> bool:
    """A scaler's state saved or restored, or `amp` passed as an argument (codemods/checkpoint_lint.py)."""
    return _CKPT_LINT_SHAPE.search(data) is not None


CHECKPOINT_LINT = Screen("checkpoint_lint", (b"scaler", b"amp"), _may_lint_checkpoint)
HAZARDS = Screen("hazards", (b"autocast", b"GradScaler", b"apex", b".half()", b"float16", b"scale_loss"),
                 _may_have_hazard)
LINT_AUTOCAST_MODES = Screen("lint_autocast_modes", (b"autocast", b"GradScaler", b"apex"))  # apex: migrated here
SCALER_CALLS = Screen("scaler_calls", (b"scaler", b"Scaler"), _defines_scaler_parameter)
_SCALER_FROM_AMP_KEY = re.compile(rb"""[Ss]caler\s*\.\s*load_state_dict\s*\([^)]*['"]amp['"]""")


def _restores_scaler_from_amp_key(data: bytes, module_name: str = "") -> bool:
    """`scaler.load_state_dict(ckpt["amp"])` (codemods/checkpoint_followup.py)."""
    return _SCALER_FROM_AMP_KEY.search(data) is not None


CHECKPOINT_FOLLOWUP = Screen("checkpoint_followup", (b"load_state_dict",), _restores_scaler_from_amp_key)

_FSDP2_SHAPE = re.compile(rb"DistributedDataParallel|\bDDP\b|autocast|GradScaler|^[ \t]*(?:from|import)[ \t]+apex\b", re.M)


def _may_shard(data: bytes, module_name: str = "") -> bool:
    """A DDP wrap, autocast or GradScaler, or an apex import (codemods/fsdp2.py, `--target fsdp2` only)."""
    return _FSDP2_SHAPE.search(data) is not None


# `--target fsdp2` only (the codemod returns at once under the default target)
FSDP2 = Screen("fsdp2", (b"DistributedDataParallel", b"DDP", b"autocast", b"GradScaler", b"apex"), _may_shard)

# in the order of `codemods.registry.all_codemods()`
SCREENS: Tuple[Screen, ...] = (CUDA_AMP, AMP, AMP_UNRESOLVED, APEX_MODULES, MANUAL_SCALING, APEX_PARALLEL, LAUNCH,
                               LAUNCH_LINES, IMPORTS, HAZARDS, LINT_AUTOCAST_MODES, SCALER_CALLS, CHECKPOINT_LINT,
                               CHECKPOINT_FOLLOWUP, FSDP2)

# The same screens, those that may parse a file with the stdlib (an install guard, a scaled backward,
# a hazard) last: whether *some* codemod wants a file is then mostly answered without a parse
BY_COST: Tuple[Screen, ...] = (CUDA_AMP, AMP, AMP_UNRESOLVED, APEX_MODULES, APEX_PARALLEL, LAUNCH, LAUNCH_LINES,
                               IMPORTS, LINT_AUTOCAST_MODES, SCALER_CALLS, CHECKPOINT_LINT, CHECKPOINT_FOLLOWUP, FSDP2,
                               MANUAL_SCALING, HAZARDS)

# Cheap first stage: a file none of these byte strings occur in cannot need any codemod.
PREFILTER = re.compile(
    rb"apex|cuda\.amp|cpu\.amp|torch\.(?:cuda|cpu) import amp|\bspawn\b|start_processes|distributed\.launch|local_rank|local-rank|"
    rb"init_process_group|MASTER_ADDR|MASTER_PORT|\.half\(\)|float16|loss_scale|masked_fill|"
    rb"BCELoss|binary_cross_entropy|scale_loss|master_params|[-]1e\d|float\(.-inf.\)|(?i:loss_?scal)|scaled_loss|FP16_Optimizer|fp16_utils|autocast|GradScaler|[Ss]caler|"
    rb"\bamp\s*[,)]|" + b"|".join(sorted(n.encode() for n in APEX_EXTENSIONS if "apex" not in n))
)
