"""Where a module still reads its apex names once the rewrites ran, outside imports and the guards
that only check apex is installed (asserts, `if not has_apex: raise`), the `amp = None` fallbacks and
`amp is None` tests; string annotations and `cast("FusedAdam", ...)` count as uses."""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Set, Tuple

import libcst as cst

from .base import FileContext
from .index import ModuleIndex
from .names import ImportTable, dotted_name, names_read


def is_guard_stmt(stmt: cst.CSTNode, guard_names: Set[str]) -> bool:
    """An assert or `if <apex check>: raise/print/warn` that exists only to check apex is installed."""
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assert):
        return bool(names_read(stmt.body[0].test)) and names_read(stmt.body[0].test) <= guard_names | {"None"}
    if isinstance(stmt, cst.If) and stmt.orelse is None:
        test_names = names_read(stmt.test)
        if not test_names or not test_names <= guard_names | {"None"}:
            return False
        body = stmt.body.body if isinstance(stmt.body, cst.IndentedBlock) else []
        for s in body:
            if not isinstance(s, cst.SimpleStatementLine):
                return False
            for small in s.body:
                if isinstance(small, cst.Raise):
                    continue
                if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
                    d = dotted_name(small.value.func) or ""
                    if d.split(".")[-1] in ("print", "warn", "warning", "error", "exit"):
                        continue
                return False
        return True
    return False


def apex_uses(module: cst.Module, homes: Dict[str, Set[int]], locals_: Set[str]
               ) -> Tuple[Dict[str, List[cst.Name]], List[cst.CSTNode], List[cst.CSTNode], List[cst.CSTNode]]:
    """Where the module still reads names, outside imports and apex guards, in source order.

    `homes` maps each guard name (apex local or flag) to the scopes that define it (see `scope_id`).
    Returns (uses by name, guard statements, `amp = None`-style fallback assignments in a scope
    defining the name, `amp is (not) None` comparisons); the last three and the imports are not
    searched for uses. Attribute names, keyword names of arguments are not uses.
    """
    index = ModuleIndex.of(module)
    # an ALL_CAPS name imported from apex (`HAS_UCC`) is a feature constant, not apex itself: a test of it
    # checks that feature, not that apex is installed
    guard_names = {n for n in homes if not (n in locals_ and n.isupper())}
    uses: Dict[str, List[cst.Name]] = {}
    guard_stmts: List[cst.CSTNode] = []
    fallback_assigns: List[cst.CSTNode] = []
    guard_comparisons: List[cst.CSTNode] = []

    def visit(node: cst.CSTNode) -> Sequence[Optional[cst.CSTNode]]:
        t = type(node)
        if t is cst.Name:
            uses.setdefault(node.value, []).append(node)  # type: ignore[attr-defined,arg-type]
        elif t is cst.Attribute:
            return (node.attr,)  # type: ignore[attr-defined]
        elif t is cst.Arg:
            return (node.keyword,)  # type: ignore[attr-defined]
        elif t is cst.Import or t is cst.ImportFrom or t is cst.Global or t is cst.Nonlocal:
            return (node,)  # `global amp` beside a lazy `from apex import amp` reads nothing
        elif (t is cst.SimpleStatementLine or t is cst.If) and is_guard_stmt(node, guard_names):
            guard_stmts.append(node)
            return (node,)
        elif t is cst.SimpleStatementLine and len(node.body) == 1 and \
                isinstance(node.body[0], cst.Assign):  # type: ignore[attr-defined]
            a = node.body[0]  # type: ignore[attr-defined]
            tnames = {dotted_name(t.target) for t in a.targets}
            if tnames <= guard_names and isinstance(a.value, cst.Name) and \
                    a.value.value in ("None", "True", "False") and \
                    all(scope_id(node, index) in homes[n] for n in tnames):  # type: ignore[index]
                fallback_assigns.append(node)
                return (node,)
        elif t is cst.Comparison:
            # `amp is None` / `amp is not None` fold to constants once apex is gone
            n = node
            if isinstance(n.left, cst.Name) and n.left.value in locals_ and len(n.comparisons) == 1 and \
                    isinstance(n.comparisons[0].operator, (cst.Is, cst.IsNot)) and \
                    isinstance(n.comparisons[0].comparator, cst.Name) and \
                    n.comparisons[0].comparator.value == "None":  # type: ignore[attr-defined]
                guard_comparisons.append(n)
                return (node,)
        return ()

    index.walk_pruned(visit)
    return uses, guard_stmts, fallback_assigns, guard_comparisons


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def kept_by_comment(node: cst.CSTNode, ctx: FileContext) -> bool:
    """Whether an `# apex2amp: ignore` comment sits on the line of `node` (which then stays apex's)."""
    return bool(ctx.suppressions) and ctx.line_of(node) in ctx.suppressions.lines


def forward_references(index: ModuleIndex, names: Set[str]) -> Set[str]:
    """The `names` a string annotation (`x: "FusedAdam"`, `Optional["FusedAdam"]`) or the type
    argument of `cast("FusedAdam", ...)` refers to: a type checker reads them, so their imports
    (often under `if TYPE_CHECKING:`) are not unused."""
    out: Set[str] = set()
    for s in index.strings:
        if not any(name in s.value for name in names) or not _is_type_string(s, index):
            continue
        try:
            text = s.evaluated_value
        except Exception:  # pragma: no cover - a string libcst cannot evaluate names nothing
            continue
        if isinstance(text, str):
            out.update(names.intersection(_IDENTIFIER.findall(text)))
    return out


def _is_type_string(s: cst.SimpleString, index: ModuleIndex) -> bool:
    """Whether `s` is (inside) an annotation, or the first argument of a `cast(...)` call."""
    parent = index.parent(s)
    if isinstance(parent, cst.Arg) and parent.keyword is None:
        call = index.parent(parent)
        if isinstance(call, cst.Call) and call.args and call.args[0] is parent and \
                (dotted_name(call.func) or "").rpartition(".")[2] == "cast":
            return True
    for a in index.ancestors(s):
        if isinstance(a, cst.Annotation):
            return True
        if isinstance(a, (cst.BaseStatement, cst.BaseSmallStatement)):
            return False
    return False


def scope_id(node: cst.CSTNode, index: ModuleIndex) -> int:
    """id() of the function, lambda or class whose scope `node` is in (0: the module's)."""
    for a in index.ancestors(node):
        if isinstance(a, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return id(a)
    return 0


def guard_homes(index: ModuleIndex, table: ImportTable, locals_: Set[str], flag_tries: Dict[str, List[cst.Try]]
           ) -> Dict[str, Set[int]]:
    """Each apex local and flag with the scopes that define it: those of its imports, or of its `try`s."""
    homes = {name: {scope_id(stmt, index) for stmt in table.statements.get(name, [])} for name in locals_}
    for flag, tries in flag_tries.items():
        homes[flag] = {scope_id(t, index) for t in tries}
    return homes
