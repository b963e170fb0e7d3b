"""The ordered list of codemods a run applies.

Order matters: API rewrites first, then launch changes, then apex import removal (which only drops
imports the earlier rewrites left unused), then the lints of the migrated code (fp16 hazards, calls
missing the scaler (A2A701), checkpoints (A2A704), restores from apex's checkpoint key (A2A107)), and
last the opt-in `--target fsdp2` on the migrated code.
"""
from __future__ import annotations

from typing import List, Tuple

from . import (amp, amp_object_attr_rewrite, amp_unresolved, apex_mentions, apex_modules, apex_parallel,
               checkpoint_followup, checkpoint_lint, cuda_amp, fsdp2, hazards, imports, launch, launch_lines,
               launch_messages,
               lint_autocast_modes, manual_scaling, scaler_calls)
from .base import Codemod


def all_codemods() -> List[Codemod]:
    return [
        cuda_amp.DeprecatedCudaAmpToTorchAmp(),
        amp.ApexAmpToTorchAmp(),
        amp_object_attr_rewrite.HandleOnObject(),  # before amp_unresolved: a migrated handle is no finding
        amp_unresolved.UnresolvedAmpApi(),
        apex_modules.ApexModulesToTorch(),
        manual_scaling.ManualLossScalingToGradScaler(),
        apex_parallel.ApexParallelToTorchDDP(),
        launch.SpawnToTorchrun(),
        launch_messages.LaunchNamedInMessage(),  # before launch_lines: a message it fixes is no A2A415
        launch_lines.LaunchCommandInCode(),
        imports.RemoveApexImports(),
        apex_mentions.ApexNamedInText(),
        hazards.Fp16HazardLint(),
        lint_autocast_modes.AutocastModeLint(),
        scaler_calls.MissingScalerArgumentLint(),
        checkpoint_lint.NativeCheckpointLint(),
        checkpoint_followup.ApexCheckpointFollowUp(),
        fsdp2.FullyShardTarget(),  # --target fsdp2 only: on the migrated code
    ]


CODEMODS: List[Codemod] = all_codemods()
# every codemod's TOKENS and WORDS, each once: a file holding none of them needs no codemod
TOKENS: Tuple[bytes, ...] = tuple(dict.fromkeys(t for cm in CODEMODS for t in cm.TOKENS))
WORDS: Tuple[bytes, ...] = tuple(dict.fromkeys(w for cm in CODEMODS for w in cm.WORDS if w not in TOKENS))


def may_need_work(data: bytes) -> bool:
    """True when some codemod might apply to a file with these bytes (one of its TOKENS or WORDS occurs)."""
    return any(t in data for t in TOKENS) or any(has_word(data, w) for w in WORDS)


_WORD_CHARS = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def has_word(data: bytes, word: bytes) -> bool:
    """Whether `word` occurs in `data` with no letter, digit or underscore right before or after it."""
    i = data.find(word)
    while i >= 0:
        j = i + len(word)
        if (i == 0 or data[i - 1] not in _WORD_CHARS) and (j == len(data) or data[j] not in _WORD_CHARS):
            return True
        i = data.find(word, i + 1)
    return False
