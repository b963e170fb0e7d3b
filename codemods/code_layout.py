"""Code that moves or is rebuilt keeps reading right: parentheses where an operand needs them, lines
continued by a backslash re-indented with their statement, arguments aligned under a renamed callee's
parenthesis shifted with it."""
from __future__ import annotations

import re
from typing import List, Sequence

import libcst as cst

from .walk import Transformer


def as_primary(expr: cst.BaseExpression) -> cst.BaseExpression:
    """`expr` in parentheses unless it is a primary already (a name, attribute, call or subscript, or
    parenthesised): what `not`, `.item()` or `.backward()` can be put next to."""
    if isinstance(expr, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) or expr.lpar:
        return expr
    return expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])



_CONTINUATION = re.compile(r"\\\r?\n")


class _ContinuationIndent(Transformer):
    def __init__(self, extra: str):
        super().__init__()
        self.extra = extra

    def leave_SimpleWhitespace(self, original_node: cst.SimpleWhitespace,
                               updated_node: cst.SimpleWhitespace) -> cst.SimpleWhitespace:
        if "\\" not in updated_node.value:
            return updated_node
        return updated_node.with_changes(value=_CONTINUATION.sub(lambda m: m.group(0) + self.extra,
                                                                 updated_node.value))


def indent_continuations(stmts: Sequence[cst.BaseStatement], extra: str) -> List[cst.BaseStatement]:
    """`stmts`, about to move `extra` deeper (into a new block), with the lines continued by a backslash
    moved as well: libcst re-indents statements and bracketed continuation lines, but keeps the
    whitespace after a backslash as written."""
    out: List[cst.BaseStatement] = []
    for stmt in stmts:
        if extra and "\\" in cst.Module([]).code_for_node(stmt):
            stmt = stmt.visit(_ContinuationIndent(extra))  # type: ignore[assignment]
        out.append(stmt)
    return out


class _ShiftAligned(Transformer):
    def __init__(self, column: int, delta: int):
        super().__init__()
        self.column = column
        self.delta = delta

    def leave_ParenthesizedWhitespace(self, original_node: cst.ParenthesizedWhitespace,
                                      updated_node: cst.ParenthesizedWhitespace) -> cst.ParenthesizedWhitespace:
        width = len(updated_node.last_line.value)
        if not updated_node.indent or updated_node.last_line.value.strip(" ") or width < self.column:
            return updated_node
        return updated_node.with_changes(last_line=cst.SimpleWhitespace(" " * (width + self.delta)))


def realign_call(old: cst.Call, new: cst.Call, first_line: str) -> cst.Call:
    """`new` (`old` with another callee) with the continuation lines that were aligned with `old`'s open
    parenthesis, or further right, moved by the change in the callee's length, so a multi-line call
    stays aligned (`FusedAdam(a,\\n          b)` -> `optim.AdamW(a,\\n            b)`). `first_line` is the
    first line of the statement holding the call, as written from its indentation on; where the call's
    first line does not occur in it exactly once, `new` is returned as it is."""
    module = cst.Module([])
    old_code = module.code_for_node(old)
    if "\n" not in old_code:
        return new
    old_func, new_func = module.code_for_node(old.func), module.code_for_node(new.func)
    if "\n" in old_func or "\n" in new_func:  # the arguments moved into the callee (`x.item()`): not a rename
        return new
    delta = len(new_func) - len(old_func)
    head = old_code.split("\n", 1)[0]
    if not delta or first_line.count(head) != 1:
        return new
    if not (isinstance(old.whitespace_after_func, cst.SimpleWhitespace)
            and isinstance(old.whitespace_before_args, cst.SimpleWhitespace)):
        return new
    column = first_line.index(head) + len(old_func) + len(old.whitespace_after_func.value) + 1
    return new.visit(_ShiftAligned(column, delta))  # type: ignore[return-value]
