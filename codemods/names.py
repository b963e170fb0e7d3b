"""Name resolution through imports, without libcst's full QualifiedNameProvider.

An `ImportTable` lists, for each local name a module binds by importing, the dotted names it may
refer to (a name bound by two imports, say apex's DDP in one branch and torch's in another, has
both). `qualified_names(expr)` maps `amp.initialize` to `{"apex.amp.initialize"}` when `amp` came
from `from apex import amp` or `import apex.amp as amp`, and to nothing when `amp` is a local object.
"""
from __future__ import annotations

from typing import Dict, Iterable, List, Optional, Set, Tuple

import libcst as cst

from . import templates
from .walk import Visitor, children


def dotted_name(node: cst.BaseExpression) -> Optional[str]:
    """`a.b.c` for a Name/Attribute chain, else None."""
    parts: List[str] = []
    while type(node) is cst.Attribute:  # concrete classes: a type test, not an abstract-class isinstance
        parts.append(node.attr.value)  # type: ignore[attr-defined]
        node = node.value  # type: ignore[attr-defined]
    if type(node) is cst.Name:
        parts.append(node.value)
        return ".".join(reversed(parts))
    return None


def module_dotted(node: Optional[cst.BaseExpression]) -> str:
    if node is None:
        return ""
    return dotted_name(node) or ""


class ImportTable:
    """Local names bound by imports anywhere in a module, with the statements that bind them."""

    def __init__(self, module: cst.Module, module_name: str = "", is_package: bool = False):
        from .index import ModuleIndex

        self.bindings: Dict[str, Set[str]] = {}
        self.statements: Dict[str, List[cst.CSTNode]] = {}  # local name -> import statements binding it
        self.star_modules: Dict[str, List[cst.ImportFrom]] = {}
        self.module_name = module_name
        self.is_package = is_package
        collector = _Collector(self)
        for node in ModuleIndex.of(module).imports:
            if isinstance(node, cst.Import):
                collector.visit_Import(node)
            else:
                collector.visit_ImportFrom(node)  # type: ignore[arg-type]

    @classmethod
    def of(cls, module: cst.Module, module_name: str = "", is_package: bool = False) -> "ImportTable":
        """The (cached) import table of `module`."""
        from .index import ModuleIndex

        tables = ModuleIndex.of(module).tables
        key = f"{module_name}|{is_package}"
        table = tables.get(key)
        if table is None:
            table = tables[key] = cls(module, module_name, is_package)
        return table  # type: ignore[return-value]

    def _bind(self, local: str, qualified: str, stmt: cst.CSTNode) -> None:
        self.bindings.setdefault(local, set()).add(qualified)
        self.statements.setdefault(local, []).append(stmt)

    def resolve_relative(self, dots: int, module: str) -> str:
        if dots == 0:
            return module
        parts = self.module_name.split(".") if self.module_name else []
        if not self.is_package:
            parts = parts[:-1]
        if dots > 1:
            parts = parts[: len(parts) - (dots - 1)] if dots - 1 <= len(parts) else []
        base = ".".join(parts)
        if module:
            return f"{base}.{module}" if base else module
        return base

    def qualified_names(self, node: cst.BaseExpression) -> Set[str]:
        """Every dotted name `node` may refer to through the module's imports."""
        name = dotted_name(node)
        if name is None:
            return set()
        return self.qualify(name)

    def qualify(self, name: str) -> Set[str]:
        head, _, rest = name.partition(".")
        out: Set[str] = set()
        bound = self.bindings.get(head)
        if bound is None and head == "torch":
            # torch not imported here: seen through `from models import *` (or not at all, and the
            # file cannot run yet); a rewrite elsewhere in the file may add `import torch`, and the
            # next rewrite must then find nothing new to do
            bound = {"torch"}
        for q in bound or ():
            out.add(f"{q}.{rest}" if rest else q)
        return out

    def refers_to(self, node: cst.BaseExpression, *targets: str) -> bool:
        qs = self.qualified_names(node)
        return any(q in targets for q in qs)

    def refers_under(self, node: cst.BaseExpression, prefix: str) -> bool:
        return any(q == prefix or q.startswith(prefix + ".") for q in self.qualified_names(node))

    def locals_for(self, qualified: str) -> List[str]:
        """Local names bound exactly to `qualified`."""
        return [local for local, qs in self.bindings.items() if qualified in qs]

    def names_under(self, prefix: str) -> List[str]:
        return [local for local, qs in self.bindings.items()
                if any(q == prefix or q.startswith(prefix + ".") for q in qs)]


class _Collector(Visitor):
    def __init__(self, table: ImportTable):
        self.table = table

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            full = module_dotted(alias.name)
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                self.table._bind(alias.asname.name.value, full, node)
            else:
                self.table._bind(full.split(".")[0], full.split(".")[0], node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        dots = len(node.relative)
        base = self.table.resolve_relative(dots, module_dotted(node.module))
        if isinstance(node.names, cst.ImportStar):
            self.table.star_modules.setdefault(base, []).append(node)
            return
        for alias in node.names:
            name = module_dotted(alias.name)
            local = name
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
            self.table._bind(local, f"{base}.{name}" if base else name, node)


def import_bound_names(stmt: cst.CSTNode) -> Set[str]:
    """Local names an Import/ImportFrom statement binds (nothing for `import *` or other nodes)."""
    out: Set[str] = set()
    if isinstance(stmt, cst.Import):
        for a in stmt.names:
            out.add(a.asname.name.value if a.asname else (dotted_name(a.name) or "").split(".")[0])  # type: ignore[union-attr]
    elif isinstance(stmt, cst.ImportFrom) and not isinstance(stmt.names, cst.ImportStar):
        for a in stmt.names:
            out.add(a.asname.name.value if a.asname else dotted_name(a.name) or "")  # type: ignore[union-attr]
    return out


def names_read(node: cst.CSTNode) -> Set[str]:
    """Names loaded anywhere inside `node` (heads of attribute chains included, attrs excluded)."""
    if isinstance(node, cst.Module):
        from .index import ModuleIndex
        return set(ModuleIndex.of(node).read_names)
    out: Set[str] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        t = type(n)
        if t is cst.Name:
            out.add(n.value)  # type: ignore[attr-defined]
        elif t is cst.Attribute or t is cst.Arg:
            stack.append(n.value)  # type: ignore[attr-defined]
        elif t is cst.Param:
            stack.extend(c for c in (n.default, n.annotation) if c is not None)  # type: ignore[attr-defined]
        elif t is not cst.Import and t is not cst.ImportFrom:
            stack.extend(children(n))
    return out


def assigned_names(stmt: cst.CSTNode) -> Set[str]:
    """Names (or dotted attribute targets like `self.loss`) a statement assigns at its own level."""
    out: Set[str] = set()

    def add_target(t: cst.BaseExpression) -> None:
        if isinstance(t, (cst.Tuple, cst.List)):
            for el in t.elements:
                add_target(el.value)
        elif isinstance(t, cst.StarredElement):
            add_target(t.value)
        else:
            d = dotted_name(t)
            if d:
                out.add(d)
            elif isinstance(t, cst.Subscript):
                d = dotted_name(t.value)
                if d:
                    out.add(d)

    stack = [stmt]
    while stack:
        n = stack.pop()
        t = type(n)
        if t is cst.FunctionDef or t is cst.ClassDef:
            out.add(n.name.value)  # type: ignore[attr-defined]
            continue
        if t is cst.Lambda:
            continue
        if t is cst.Assign:
            for target in n.targets:  # type: ignore[attr-defined]
                add_target(target.target)
        elif t is cst.AnnAssign or t is cst.AugAssign or t is cst.For or t is cst.NamedExpr:
            add_target(n.target)  # type: ignore[attr-defined]
        elif t is cst.AsName:
            add_target(n.name)  # type: ignore[attr-defined]
        stack.extend(children(n))
    return out


def iter_calls(node: cst.CSTNode) -> Iterable[cst.Call]:
    found: List[cst.Call] = []

    class V(Visitor):
        def visit_Call(self, n: cst.Call) -> None:
            found.append(n)

    node.visit(V())
    return found


def arg_by(call: cst.Call, index: int, keyword: str) -> Optional[cst.Arg]:
    """The argument bound to parameter `keyword` at position `index` (None if absent or unclear)."""
    pos = 0
    for a in call.args:
        if a.keyword is not None:
            if a.keyword.value == keyword:
                return a
            continue
        if a.star:
            return None if pos <= index else None
        if pos == index:
            return a
        pos += 1
    return None


def sole_call(stmt: cst.CSTNode) -> Optional[cst.Call]:
    """The call when `stmt` is a statement line holding exactly one call expression (`f(x)`)."""
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr) \
            and isinstance(stmt.body[0].value, cst.Call):
        return stmt.body[0].value
    return None


def has_star_args(call: cst.Call) -> bool:
    return any(a.star for a in call.args)


def code_of(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


def norm_code(node: cst.CSTNode) -> str:
    """Whitespace-insensitive code of a node, for comparing expressions."""
    return "".join(code_of(node).split())


def literal_string(node: Optional[cst.BaseExpression]) -> Optional[str]:
    if isinstance(node, cst.SimpleString):
        try:
            v = node.evaluated_value
        except Exception:  # pragma: no cover - odd prefixes
            return None
        return v if isinstance(v, str) else None
    return None


def literal_number(node: Optional[cst.BaseExpression]) -> Optional[float]:
    if isinstance(node, (cst.Integer, cst.Float)):
        try:
            return float(node.evaluated_value)
        except Exception:
            return None
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        v = literal_number(node.expression)
        return -v if v is not None else None
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Power):
        return power_value(literal_number(node.left), literal_number(node.right))
    return None


def parse_expr(code: str) -> cst.BaseExpression:
    return templates.expression(code)


def parse_stmt(code: str) -> cst.BaseStatement:
    return templates.statement(code)


Position = Tuple[int, int]


def power_value(a: Optional[float], b: Optional[float]) -> Optional[float]:
    """`a ** b` of two literal numbers: inf when it overflows, None when undefined (0 ** -1, a complex
    root) or when the exponent is out of reach (|b| >= 400)."""
    if a is None or b is None or abs(b) >= 400:
        return None
    try:
        v = a ** b
    except OverflowError:
        return float("inf")
    except ZeroDivisionError:
        return None
    return v if isinstance(v, float) else None
