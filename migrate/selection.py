"""The engine's guard that a deselected rule never edits: a codemod stage that made an edit whose
rule `--select/--ignore` leaves out is undone as a whole (its edits may depend on each other), so
ignoring a code stops its edit and not only its finding. Codemods that honour `ctx.enabled` per
site never get here; this catches the ones that do not."""
from __future__ import annotations

import copy
from typing import Any, Callable, List, Optional

from codemods.base import FileContext, Finding, RepoFacts


def _narrow(select: Callable[[str], bool]) -> bool:
    every = getattr(select, "takes_every_rule", None)
    return every is None or not every()


def snapshot_facts(codemod: Any, ctx: FileContext) -> Optional[RepoFacts]:
    """A copy of the facts the file published so far, when a narrow selection may have to undo
    `codemod`'s stage (only a fact-publishing codemod adds to them)."""
    if not getattr(codemod, "PUBLISHES_FACTS", False) or not _narrow(ctx.select):
        return None
    return copy.deepcopy(ctx.exported)


def made_deselected_edit(stage: List[Finding], select: Callable[[str], bool]) -> bool:
    """Whether the stage applied a fix whose rule the selection leaves out."""
    return _narrow(select) and any(f.fixed and not select(f.code) for f in stage)


def undo_stage(stage: List[Finding], ctx: FileContext, published: Optional[RepoFacts]) -> List[Finding]:
    """The findings left once the stage's edits are dropped: those that fixed nothing (the facts the
    stage published go back to what they were)."""
    if published is not None:
        ctx.exported = published
    return [f for f in stage if not f.fixed]
