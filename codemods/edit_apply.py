"""Applying an EditPlan: one rebuild down the paths to the planned nodes, the edits made on the way up.

Blocks a removal empties are cleaned up: an emptied `if` without `else` goes, an emptied `else` goes,
an emptied `try` goes with its handlers, and any other emptied block gets `pass`. Replacements carry
the edits other plans made inside the node they replace.
"""
from __future__ import annotations

import typing
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Set, Tuple, Union

import libcst as cst

from .code_layout import as_primary
from .edit_comments import Lines, close_block, comment_lines, emptied_comments, rehome_comments, with_comments_before
from .libcst_private import is_removable
from .walk import SEQUENCE, Transformer, field_names, value_kind

if TYPE_CHECKING:
    from .edits import EditPlan


class PlanApplier:
    """Applies an EditPlan: `rebuild` goes down the paths to the planned nodes, `on_leave` edits on
    the way back up."""

    def __init__(self, plan: EditPlan, needed: Set[int]):
        self.plan = plan
        self.needed = needed
        self.produced: Dict[int, int] = {}  # id(original stmt) -> how many statements it became
        # blocks our removals emptied, by id, holding the block itself: a bare id of a temporary node
        # can be reused by another node once the first is freed, and would mark an unrelated block
        self.emptied: Dict[int, cst.CSTNode] = {}
        self.carried: Dict[int, Lines] = {}  # id(original stmt) -> comments of a statement that went
        self.elifs: Set[int] = set()  # ids of planned `if` nodes that are an `elif` (their parent's orelse)

    def rebuild(self, node: cst.CSTNode) -> Union[cst.CSTNode, cst.RemovalSentinel, cst.FlattenSentinel]:
        """What libcst's `node.visit(self)` gives for a node of `needed`, visiting only the nodes of
        `needed` below it (the ids of the planned nodes and their ancestors): the rest stay the very
        nodes they were.

        As libcst's visit (libcst/_nodes/internal.py), minus its calls on every other child: children
        first; in a sequence a removed child goes and a flattened one is spliced in, and in a body
        (Module's, IndentedBlock's) a statement line left empty goes too; a removed child of an
        optional field becomes None, of a `MaybeSentinel` one MaybeSentinel.DEFAULT; a leave hook
        must return a node or a sentinel. A node is rebuilt (and validated) only when a child
        changed. Siblings are left in field order, not libcst's source order: no leave hook here
        depends on a sibling's.
        """
        needed = self.needed
        changes: Dict[str, object] = {}
        for name in field_names(type(node)):
            value = getattr(node, name)
            if value_kind(type(value)) == SEQUENCE:
                if not any(id(v) in needed for v in value):
                    continue
                body = name == "body" and (type(node) is cst.Module or type(node) is cst.IndentedBlock)
                items: List[cst.CSTNode] = []
                changed = False
                for child in value:
                    if id(child) not in needed:
                        items.append(child)
                        continue
                    new = self.rebuild(child)
                    if new is child:
                        items.append(child)
                        continue
                    changed = True
                    if isinstance(new, cst.RemovalSentinel):
                        continue
                    for one in (new.nodes if isinstance(new, cst.FlattenSentinel) else (new,)):
                        if body and is_removable(one) and not is_removable(child):
                            continue
                        items.append(one)
                if changed:
                    changes[name] = tuple(items)
            elif id(value) in needed:
                new = self.rebuild(value)
                if new is value:
                    continue
                if isinstance(new, cst.FlattenSentinel):
                    raise TypeError(f"a {type(value).__name__} in {type(node).__name__}.{name} cannot become "
                                    "a sequence")
                if isinstance(new, cst.RemovalSentinel):
                    new = _removed_value(type(node), name)
                changes[name] = new
        updated = node.with_changes(**changes) if changes else node
        result = self.on_leave(node, updated)
        if not isinstance(result, (cst.CSTNode, cst.RemovalSentinel, cst.FlattenSentinel)):
            raise cst.CSTValidationError("Expected a node of type CSTNode or a RemovalSentinel, "
                                         f"but got a return value of {type(result).__name__}")
        return result

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode
                 ) -> Union[cst.CSTNode, cst.RemovalSentinel, cst.FlattenSentinel]:
        func = getattr(self, f"leave_{type(original_node).__name__}", None)
        if func is not None:
            updated_node = func(original_node, updated_node)
            if isinstance(updated_node, (cst.RemovalSentinel, cst.FlattenSentinel)):
                return updated_node
        return self._generic(original_node, updated_node)

    def _generic(self, original_node: cst.CSTNode, updated_node: cst.CSTNode
                 ) -> Union[cst.CSTNode, cst.RemovalSentinel, cst.FlattenSentinel]:
        plan = self.plan
        node = updated_node
        if original_node in plan.transforms:
            node = plan.transforms[original_node](node)
        replaced = original_node in plan.replace_node or original_node in plan.replace_stmt
        edited = _edited_parts(original_node, updated_node) if replaced else {}
        if original_node in plan.replace_node:
            node = _with_edits(plan.replace_node[original_node], edited)
        is_stmt = isinstance(original_node, (cst.BaseStatement, cst.BaseSmallStatement))
        inner: Lines = []
        if is_stmt and isinstance(original_node, cst.BaseStatement):
            node, inner = self._clean_compound(original_node, node)
        if not is_stmt:
            return node
        stmts: List[cst.CSTNode]
        lead = getattr(original_node, "leading_lines", ())
        carried: Lines = []
        if original_node in plan.replace_stmt:
            stmts = [_with_edits(s, edited) for s in plan.replace_stmt[original_node]]
            if stmts and isinstance(original_node, cst.BaseStatement) and isinstance(stmts[0], cst.BaseStatement):
                if lead and not stmts[0].leading_lines:
                    stmts[0] = stmts[0].with_changes(leading_lines=lead)
                elif not _mentions_comments(stmts[0].leading_lines, lead):
                    carried = comment_lines(lead)
        elif node is None:
            stmts = []
        elif isinstance(node, list):  # an emptied `try` whose `else:` / `finally:` code stays
            stmts = list(node)
            if lead:
                stmts[0] = stmts[0].with_changes(leading_lines=[*lead, *stmts[0].leading_lines])
        else:
            stmts = [node]
        if not stmts and isinstance(original_node, cst.BaseStatement):
            carried = comment_lines(lead) + inner
        before = list(plan.before.get(original_node, []))
        after = list(plan.after.get(original_node, []))
        if before and stmts and getattr(stmts[0], "leading_lines", None):
            before[0] = before[0].with_changes(leading_lines=stmts[0].leading_lines)
            stmts[0] = stmts[0].with_changes(leading_lines=[])
        out = before + stmts + after
        if carried and out:
            out[0] = with_comments_before(out[0], carried)
        elif carried:
            self.carried[id(original_node)] = carried
        self.produced[id(original_node)] = len(out)
        if len(out) == 1 and out[0] is updated_node:
            return updated_node
        if id(original_node) in self.elifs:
            return _as_elif(out)
        if not out:
            return cst.RemovalSentinel.REMOVE
        return cst.FlattenSentinel(out)

    # -- blocks -----------------------------------------------------------------------------
    def _regroup(self, original_body: Sequence[cst.CSTNode], updated_body: Sequence[cst.CSTNode]
                 ) -> List[cst.CSTNode]:
        wraps = [w for w in self.plan.wraps if any(s is w[0] for s in original_body)]
        if not wraps:
            return list(updated_body)
        segments: List[List[cst.CSTNode]] = []
        pos = 0
        for s in original_body:
            n = self.produced.get(id(s), 1)
            segments.append(list(updated_body[pos:pos + n]))
            pos += n
        result: List[cst.CSTNode] = []
        i = 0
        while i < len(original_body):
            w = next((w for w in wraps if w[0] is original_body[i]), None)
            if w is None:
                result.extend(segments[i])
                i += 1
                continue
            j = i
            while j < len(original_body) and original_body[j] is not w[1]:
                j += 1
            inner: List[cst.CSTNode] = []
            for k in range(i, min(j, len(original_body) - 1) + 1):
                inner.extend(segments[k])
            if not inner:
                i = j + 1
                continue
            lead = getattr(inner[0], "leading_lines", ())
            inner[0] = inner[0].with_changes(leading_lines=[])
            wrapped = w[2](inner)
            result.append(wrapped.with_changes(leading_lines=lead))
            i = j + 1
        return result

    def leave_IndentedBlock(self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
                            ) -> cst.IndentedBlock:
        body, leftover = rehome_comments(original_node.body, updated_node.body, self.produced, self.carried,
                                         indented=True)
        body = self._regroup(original_node.body, body)
        new = close_block(updated_node, body, leftover)
        if not body:
            self.emptied[id(new)] = new
        return new

    def leave_SimpleStatementSuite(self, original_node: cst.SimpleStatementSuite,
                                   updated_node: cst.SimpleStatementSuite) -> cst.BaseSuite:
        if not updated_node.body:
            new = updated_node.with_changes(body=[cst.Pass()])
            self.emptied[id(new)] = new
            return new
        return updated_node

    def leave_SimpleStatementLine(self, original_node: cst.SimpleStatementLine,
                                  updated_node: cst.SimpleStatementLine
                                  ) -> Union[cst.BaseStatement, cst.RemovalSentinel]:
        if not updated_node.body and original_node not in self.plan.replace_stmt:
            out = list(self.plan.before.get(original_node, [])) + list(self.plan.after.get(original_node, []))
            self.produced[id(original_node)] = len(out)
            comments = comment_lines(original_node.leading_lines)
            if out:
                return cst.FlattenSentinel([with_comments_before(out[0], comments), *out[1:]])
            if comments:
                self.carried[id(original_node)] = comments
            return cst.RemovalSentinel.REMOVE
        return updated_node

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        body, leftover = rehome_comments(original_node.body, updated_node.body, self.produced, self.carried)
        return close_block(updated_node, self._regroup(original_node.body, body), leftover)

    def _was_emptied(self, block: cst.CSTNode) -> bool:
        return self.emptied.get(id(block)) is block

    def _clean_compound(self, original: cst.CSTNode, node: Optional[cst.CSTNode]
                        ) -> Tuple[Optional[cst.CSTNode], Lines]:
        """Drop compound statements that our removals emptied.

        Also returns the comments removals had carried into a dropped statement's blocks; comments of an
        emptied branch that goes while its statement stays move to what stays.
        """
        if isinstance(node, cst.If):
            body_empty = self._was_emptied(node.body)
            orelse = node.orelse
            else_comments: Lines = []
            if isinstance(original, cst.If) and isinstance(original.orelse, cst.If) and orelse is None:
                else_comments = self.carried.pop(id(original.orelse), [])
            if isinstance(orelse, cst.Else) and self._was_emptied(orelse.body):
                else_comments = comment_lines(orelse.leading_lines) + emptied_comments(orelse.body)
                node = node.with_changes(orelse=None)
                orelse = None
            if body_empty and orelse is None:
                return None, emptied_comments(node.body) + else_comments
            if body_empty and isinstance(orelse, cst.Else):
                neg = cst.UnaryOperation(cst.Not(), as_primary(node.test))
                body = orelse.body
                moved = emptied_comments(node.body) + comment_lines(orelse.leading_lines)
                if moved and isinstance(body, cst.IndentedBlock):
                    body = body.with_changes(body=[with_comments_before(body.body[0], moved), *body.body[1:]])
                return node.with_changes(test=neg, body=body, orelse=None), []
            if else_comments and isinstance(node.body, cst.IndentedBlock):
                node = node.with_changes(body=node.body.with_changes(footer=[*node.body.footer, *else_comments]))
            return node, []
        if isinstance(node, cst.Try) and self._was_emptied(node.body):
            # the handlers were the "import failed" path and go with the import; `else:` ran when it
            # succeeded and `finally:` always, so what is left of them stays, in the try's place
            blocks = [node.body, *(h.body for h in node.handlers),
                      *(b.body for b in (node.orelse, node.finalbody) if b is not None)]
            comments = [c for b in blocks if self._was_emptied(b) for c in emptied_comments(b)]
            kept = [stmt for b in (node.orelse, node.finalbody)
                    if b is not None and not self._was_emptied(b.body) and isinstance(b.body, cst.IndentedBlock)
                    for stmt in b.body.body]
            return (kept or None), comments  # type: ignore[return-value]
        return node, []


_Edited = Dict[int, Tuple[cst.CSTNode, cst.CSTNode]]


def _edited_parts(original: cst.CSTNode, updated: cst.CSTNode) -> _Edited:
    """The descendants of `original` that differ in `updated` (paired child by child), by id: the edits
    other plans made inside a node that a replacement, built from the node's original parts, must
    carry (`apex.parallel.SyncBatchNorm(n, process_group=apex.parallel.create_syncbn_process_group(k))`
    replaces the outer call and, separately, the inner one)."""
    edited: _Edited = {}
    if updated is original:
        return edited
    stack = [(original, updated)]
    while stack:
        o, u = stack.pop()
        o_children, u_children = o.children, u.children
        if len(o_children) != len(u_children):
            continue  # a child was removed or split: the parts cannot be paired
        for a, b in zip(o_children, u_children):
            if a is not b and type(a) is type(b):
                edited[id(a)] = (a, b)
                stack.append((a, b))
    return edited


def _with_edits(replacement: cst.CSTNode, edited: _Edited) -> cst.CSTNode:
    """`replacement` with each of its parts that `edited` names swapped for the edited version."""
    return replacement.visit(_Substitute(edited)) if edited else replacement


class _Substitute(Transformer):
    """Swap nodes (by identity) for their edited versions, outermost first."""

    def __init__(self, edited: Dict[int, Tuple[cst.CSTNode, cst.CSTNode]]):
        super().__init__()
        self.edited = edited

    def _hit(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        pair = self.edited.get(id(node))
        return pair[1] if pair is not None and pair[0] is node else None

    def on_visit(self, node: cst.CSTNode) -> bool:
        return self._hit(node) is None

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> cst.CSTNode:
        hit = self._hit(original_node)
        return hit if hit is not None else updated_node


def _mentions_comments(lines: Sequence[cst.EmptyLine], of: Sequence[cst.EmptyLine]) -> bool:
    """Whether `lines` already hold a comment of `of` (a replacement that kept the original's lines)."""
    mine = {line.comment.value for line in lines if line.comment is not None}
    return any(line.comment is not None and line.comment.value in mine for line in of)


_REMOVED: Dict[Tuple[type, str], object] = {}


def _removed_value(cls: type, name: str) -> object:
    """What a node class's field holds once its child is removed, as libcst's visit has it: None in
    an optional field, MaybeSentinel.DEFAULT in a sentinel one; a required field raises."""
    key = (cls, name)
    if key not in _REMOVED:
        hint = cls.__dataclass_fields__[name].type  # type: ignore[attr-defined]
        options = typing.get_args(hint)
        _REMOVED[key] = cst.MaybeSentinel.DEFAULT if cst.MaybeSentinel in options else \
            None if type(None) in options else TypeError
    value = _REMOVED[key]
    if value is TypeError:
        raise TypeError(f"{cls.__name__}.{name} cannot be removed")
    return value


def _as_elif(stmts: List[cst.CSTNode]) -> Union[cst.If, cst.Else, cst.RemovalSentinel]:
    """What an `elif` planned to become statements turns into in its parent's `orelse`: another
    `elif`, an `else:` holding the statements (they ran only when the tests above failed), or nothing."""
    if not stmts:
        return cst.RemovalSentinel.REMOVE
    if len(stmts) == 1 and isinstance(stmts[0], cst.If):
        return stmts[0]
    return cst.Else(body=cst.IndentedBlock(body=stmts))  # type: ignore[arg-type]

