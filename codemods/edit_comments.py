"""Comments outlive the statements they sit above, when edits remove or flatten those statements.

Those of a removed statement move to the next statement of its block, or to the block's footer when
none follows, or, when the block itself goes, on to the statement after it; an emptied block gets
`pass`. Shared by the plan applier (codemods/edit_apply.py) and the transformers that fold statements
away (codemods/fold_flags.py).
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple, Union

import libcst as cst

Lines = List[cst.EmptyLine]


def comment_lines(lines: Sequence[cst.EmptyLine]) -> Lines:
    """`lines` up to their last comment: what a removed statement leaves behind (nothing without a comment)."""
    last = max((i for i, line in enumerate(lines) if line.comment is not None), default=-1)
    return list(lines[:last + 1])


def with_comments_before(stmt: cst.CSTNode, comments: Sequence[cst.EmptyLine]) -> cst.CSTNode:
    """`stmt` (a statement or an `else:`) with `comments` in front of its leading lines."""
    if not comments or not isinstance(stmt, (cst.BaseStatement, cst.Else)):
        return stmt
    return stmt.with_changes(leading_lines=[*comments, *stmt.leading_lines])


def rehome_comments(original_body: Sequence[cst.CSTNode], updated_body: Sequence[cst.CSTNode],
                    produced: Dict[int, int], carried: Dict[int, Lines], indented: bool = False
                    ) -> Tuple[List[cst.CSTNode], Lines]:
    """`updated_body` with the comments carried out of each removed statement of `original_body` put on
    the statement that follows it; comments that no statement follows come back as the second item.
    Empty lines above a removed run go to the statement after it when that one has none; in an
    `indented` block, a statement that becomes the first one loses the empty lines above it.

    `produced` counts the statements each original one became (1 when absent).
    """
    body = list(updated_body)
    blank_leads = {id(s): list(s.leading_lines) for s in original_body
                   if produced.get(id(s), 1) == 0 and id(s) not in carried and _blank_only(s)}
    head_removed = indented and bool(original_body) and produced.get(id(original_body[0]), 1) == 0
    if not blank_leads and not head_removed and not any(id(s) in carried for s in original_body):
        return body, []
    if head_removed:
        blank_leads.pop(id(original_body[0]), None)
    pending: Lines = []
    blanks: Optional[Lines] = None  # the empty lines above the first removed statement of a run
    pos = 0
    for s in original_body:
        n = produced.get(id(s), 1)
        pending.extend(carried.get(id(s), ()))
        if blanks is None:
            blanks = blank_leads.get(id(s))
        if n and pos < len(body):
            if pending:
                body[pos] = with_comments_before(body[pos], pending)
                pending = []
            elif head_removed and pos == 0 and _blank_only(body[0]):
                body[0] = body[0].with_changes(leading_lines=[])  # `try:` then an empty line reads oddly
            elif blanks and isinstance(body[pos], cst.BaseStatement) and not body[pos].leading_lines:
                # `import copy` / empty line / `import apex` / `import torch`: the empty line stays
                body[pos] = body[pos].with_changes(leading_lines=blanks)
            blanks = None
        pos += n
    if pos != len(updated_body):  # counts out of step: keep the comments, at the block's end
        return list(updated_body), [c for s in original_body for c in carried.get(id(s), ())]
    return body, pending


def _blank_only(stmt: cst.CSTNode) -> bool:
    lines = getattr(stmt, "leading_lines", ())
    return bool(lines) and all(line.comment is None for line in lines)


def close_block(block: Union[cst.IndentedBlock, cst.Module], body: Sequence[cst.CSTNode], leftover: Lines,
                ) -> Union[cst.IndentedBlock, cst.Module]:
    """`block` with `body`; comments no statement follows go to its footer (to a `pass` in an empty block)."""
    if isinstance(block, cst.IndentedBlock) and not body:
        return block.with_changes(body=[_pass_stmt().with_changes(leading_lines=leftover)])
    if leftover:
        return block.with_changes(body=body, footer=[*leftover, *block.footer])
    return block.with_changes(body=body)


def emptied_comments(block: cst.BaseSuite) -> Lines:
    """Comments that removals carried onto the `pass` of a block they emptied."""
    if isinstance(block, cst.IndentedBlock) and len(block.body) == 1:
        return comment_lines(block.body[0].leading_lines)
    return []


def _pass_stmt() -> cst.SimpleStatementLine:
    return cst.SimpleStatementLine(body=[cst.Pass()])

