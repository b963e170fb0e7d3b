"""A2A107 again on migrated code: a GradScaler restored from the `amp` key of a checkpoint.

`apex2amp rewrite` reports A2A107 at each apex load site it migrates; the migrated line,
`scaler.load_state_dict(ckpt["amp"])`, still receives apex-format state from checkpoints written before
the migration. So that `check` (a second pre-commit run, CI) does not forget that follow-up, this lint
reports the same code on the migrated line until the load converts apex state (the module mentions
`loss_scaler0`) or the line is marked done with `# apex2amp: ignore[A2A107]`.

Only the key apex's own examples used (`"amp"`) counts: native-AMP code that never saw apex saves its
scaler under its own name. Files the amp codemod migrates in this run were already reported by it.
"""
from __future__ import annotations

import libcst as cst

from .amp_rules import OLD_CHECKPOINT
from .base import Codemod, FileContext
from .index import ModuleIndex
from .names import dotted_name, literal_string

APEX_KEY = "amp"
CONVERTS = "loss_scaler0"  # the key of apex's scaler state: a module that reads it converts at load time


class ApexCheckpointFollowUp(Codemod):
    """Migrated scaler restores from apex's `amp` checkpoint key (findings only)."""

    NAME = "checkpoint_followup"
    DESCRIPTION = "GradScaler restored from the `amp` key old apex checkpoints fill (findings only)"
    CODES = (OLD_CHECKPOINT.code,)
    WORDS = (b"amp",)  # the key, a string literal
    REPORTS_ONLY = True

    def transform(self, wrapper: cst.MetadataWrapper, ctx: FileContext) -> cst.Module:
        module = wrapper.module
        if not ctx.enabled(OLD_CHECKPOINT.code) or "amp" in ctx.changed_by:
            return module
        index = ModuleIndex.of(module)
        if CONVERTS in index.code:
            return module
        for call in index.calls:
            f = call.func
            if not (isinstance(f, cst.Attribute) and f.attr.value == "load_state_dict" and call.args):
                continue
            receiver = dotted_name(f.value) or ""
            if "scaler" not in receiver.rpartition(".")[2].lower():
                continue
            if _read_key(call.args[0].value) != APEX_KEY:
                continue
            ctx.report(call, OLD_CHECKPOINT.code,
                       f"`{receiver}` is restored from the `{APEX_KEY}` key, which checkpoints written by apex fill "
                       "with `loss_scaler0` state that GradScaler rejects: convert them with `apex2amp "
                       "convert-checkpoint` (or convert at load time), then mark this line "
                       "`# apex2amp: ignore[A2A107]`")
        return module


def _read_key(node: cst.BaseExpression):
    """The literal key of `ckpt["amp"]` or `ckpt.get("amp")`, else None."""
    if isinstance(node, cst.Subscript) and len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index):
        return literal_string(node.slice[0].slice.value)
    if (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "get"
            and node.args):
        return literal_string(node.args[0].value)
    return None
