"""The code around the constants that replaced apex flags and `amp is (not) None` simplified:
boolean operators, `a if C else b`, and `if` / `elif` / `assert` statements whose test became
constant, keeping the comments of what goes."""
from __future__ import annotations

from typing import Any, Dict, Iterable, Optional, Sequence, Set

import libcst as cst

from .edit_comments import Lines, close_block, comment_lines, rehome_comments, with_comments_before
from .guards import FoldApexGuards


def _literal(node: cst.BaseExpression) -> Optional[bool]:
    """The value of a `True` / `False` written in the code, else None."""
    return node.value == "True" if isinstance(node, cst.Name) and node.value in ("True", "False") else None


def flag_constant(value: bool, replaced: cst.BaseExpression) -> cst.Name:
    """`True`/`False` in the place of `replaced`, keeping its parentheses."""
    return cst.Name("True" if value else "False", lpar=replaced.lpar, rpar=replaced.rpar)


class FoldStatements(FoldApexGuards):
    """Simplify around the constants that replaced apex flags and `amp is (not) None`: boolean
    operators, `a if C else b`, and `if`/`elif`/`assert` statements whose test became constant.

    Only those constants fold: a `True`/`False` the user wrote stays as written.
    """

    def __init__(self, constants: Iterable[cst.Name], paths: Optional[Set[int]] = None):
        super().__init__(set(), set())
        self.ours: Dict[int, cst.CSTNode] = {id(c): c for c in constants}
        self.paths = paths  # ids of the constants and their ancestors: nothing else can fold
        self._elifs: Set[int] = set()  # ids of the If nodes that are another If's `elif`
        self.produced: Dict[int, int] = {}  # id(original statement) -> how many statements it became
        self.carried: Dict[int, Lines] = {}  # id(original statement) -> comments of a removed statement

    def on_visit(self, node: cst.CSTNode) -> bool:
        if self.paths is not None and id(node) not in self.paths:
            return False  # no constant below: the subtree stays as it is (and keeps its identity)
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> Any:
        if self.paths is not None and id(original_node) not in self.paths:
            return updated_node
        return super().on_leave(original_node, updated_node)

    def _own(self, node: cst.CSTNode) -> cst.CSTNode:
        self.ours[id(node)] = node
        return node

    def constant(self, node: cst.BaseExpression) -> Optional[bool]:
        if self.ours.get(id(node)) is node and isinstance(node, cst.Name):
            return node.value == "True"
        return None

    def make_constant(self, value: bool) -> cst.Name:
        return self._own(super().make_constant(value))  # type: ignore[return-value]

    def keep(self, e: cst.BaseExpression, outer: cst.BaseExpression) -> cst.BaseExpression:
        kept = super().keep(e, outer)
        return self._own(kept) if self.constant(e) is not None else kept  # type: ignore[return-value]

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        return self._own(updated) if self.ours.get(id(original)) is original else updated  # type: ignore

    def leave_Comparison(self, original: cst.Comparison, updated: cst.Comparison) -> cst.BaseExpression:
        """`FLAG is False` / `FLAG == True` with FLAG one of the constants: a constant too."""
        if len(updated.comparisons) == 1 and isinstance(updated.comparisons[0].operator,
                                                        (cst.Is, cst.IsNot, cst.Equal, cst.NotEqual)):
            ct = updated.comparisons[0]
            a, b = self.constant(updated.left), self.constant(ct.comparator)
            if (a is None) != (b is None):
                a, b = (a, _literal(ct.comparator)) if b is None else (_literal(updated.left), b)
            if a is not None and b is not None:
                same = a == b
                return self.make_constant(same if isinstance(ct.operator, (cst.Is, cst.Equal)) else not same)
        return super().leave_Comparison(original, updated)

    def leave_IfExp(self, original: cst.IfExp, updated: cst.IfExp) -> cst.BaseExpression:
        value = self.constant(updated.test)
        if value is None:
            return updated
        return self.keep(updated.body if value else updated.orelse, updated)

    # -- statements ---------------------------------------------------------------------------
    def visit_If(self, node: cst.If) -> None:
        if isinstance(node.orelse, cst.If):
            self._elifs.add(id(node.orelse))

    def leave_If(self, original: cst.If, updated: cst.If):
        dropped = self.carried.pop(id(original.orelse), []) if isinstance(original.orelse, cst.If) else []
        if dropped and updated.orelse is None and isinstance(updated.body, cst.IndentedBlock):
            # comments above a removed `elif` end the body before it
            updated = updated.with_changes(body=updated.body.with_changes(footer=[*updated.body.footer, *dropped]))
        test = updated.test
        if id(original) in self._elifs:
            return self._fold_elif(original, updated, test)
        comments = comment_lines(updated.leading_lines)
        if self.constant(test) is True:
            if isinstance(updated.body, cst.IndentedBlock):
                return self._flatten(original, updated.body.body, comments)
            return updated
        if self.constant(test) is False:
            if isinstance(updated.orelse, cst.Else) and isinstance(updated.orelse.body, cst.IndentedBlock):
                return self._flatten(original, updated.orelse.body.body,
                                     comments + comment_lines(updated.orelse.leading_lines))
            if isinstance(updated.orelse, cst.If):
                return with_comments_before(updated.orelse, comments)
            return self._remove(original, comments)
        return updated

    def _flatten(self, original: cst.CSTNode, body: Sequence[cst.BaseStatement], comments: Lines):
        self.produced[id(original)] = len(body)
        return cst.FlattenSentinel([with_comments_before(body[0], comments), *body[1:]])

    def _remove(self, original: cst.CSTNode, comments: Lines) -> cst.RemovalSentinel:
        self.produced[id(original)] = 0
        if comments:
            self.carried[id(original)] = comments
        return cst.RemovalSentinel.REMOVE

    def _fold_elif(self, original: cst.If, updated: cst.If, test: cst.BaseExpression):
        """An `elif` stands in its parent's `orelse`, which takes an If, an Else or nothing: a true
        test makes its body the `else:`, a false one hands the place to what follows it."""
        if self.constant(test) is True:
            return cst.Else(body=updated.body, leading_lines=updated.leading_lines,
                            whitespace_before_colon=updated.whitespace_after_test)
        if self.constant(test) is False:
            comments = comment_lines(updated.leading_lines)
            if updated.orelse is not None:
                return with_comments_before(updated.orelse, comments)
            return self._remove(original, comments)
        return updated

    def leave_Assert(self, original: cst.Assert, updated: cst.Assert):
        if self.constant(updated.test) is True:
            return cst.RemovalSentinel.REMOVE
        return updated

    def leave_SimpleStatementLine(self, original: cst.SimpleStatementLine, updated: cst.SimpleStatementLine):
        if original.body and not updated.body:
            return self._remove(original, comment_lines(updated.leading_lines))
        return updated

    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
        body, leftover = rehome_comments(original.body, updated.body, self.produced, self.carried, indented=True)
        return close_block(updated, body, leftover)  # type: ignore[return-value]

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        body, leftover = rehome_comments(original.body, updated.body, self.produced, self.carried)
        return close_block(updated, body, leftover)  # type: ignore[return-value]
