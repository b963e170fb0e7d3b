"""Which expressions are provably bools, for `enabled=` of torch.autocast and GradScaler.

`torch.autocast(..., enabled=x)` raises a TypeError on entry unless `x` is a bool (`""`, `None`, `1`,
`"O1"` all fail), and `GradScaler(enabled=x).is_enabled()` hands back `x` as it was. So an `enabled=`
the tool writes is `bool(...)` unless the expression is provably a bool:

- `True`/`False`, a comparison, `not x`, `isinstance(...)`, `bool(...)` and other calls known to return
  bools (`torch.cuda.is_available()`, `scaler.is_enabled()`, `s.startswith(...)`);
- `a and b`, `a or b` and `a if c else b` whose operands are provable bools;
- an argparse flag of this module declared `action="store_true"`/`"store_false"` (default absent or a
  bool literal), read as `<anything>.<dest>`, when every assignment to `.<dest>` in the module is a
  provable bool too;
- a plain name that the module binds only by plain assignments of provable bools and parameters
  annotated `bool` (not another parameter, loop target, import, `with ... as` or `except ... as` name).

Whatever a module does not show (a flag parsed in another file, a config attribute) is not provable.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Set

import libcst as cst

from .index import ModuleIndex
from .names import ImportTable, dotted_name, literal_string

_BOOL_FUNCS = frozenset({
    "isinstance", "issubclass", "hasattr", "callable", "bool", "all", "any",
    "torch.cuda.is_available", "torch.cuda.is_bf16_supported", "torch.distributed.is_initialized",
    "torch.distributed.is_available", "dist.is_initialized", "dist.is_available",
    "torch.is_autocast_enabled", "torch.is_grad_enabled", "os.path.exists", "os.path.isfile", "os.path.isdir",
})
# methods that return a bool whatever their receiver (`scaler.is_enabled()`, `name.startswith("O")`)
_BOOL_METHODS = frozenset({"is_enabled", "is_available", "is_initialized", "is_bf16_supported",
                           "startswith", "endswith", "isdigit", "isnumeric", "isalpha", "is_floating_point",
                           "is_autocast_enabled"})
_BOOL_ACTIONS = frozenset({"store_true", "store_false"})
_UNKNOWN = None  # a binding whose value cannot be read (parameter, loop target, import, unpacking)


class BoolFacts:
    """What one module says about names and flags that hold bools."""

    def __init__(self, module: cst.Module):
        index = ModuleIndex.of(module)
        self.names: Dict[str, List[Optional[cst.BaseExpression]]] = {}
        self.attrs: Dict[str, List[Optional[cst.BaseExpression]]] = {}
        self.flags: Dict[str, bool] = {}  # argparse dest -> whether every declaration of it is a bool flag
        for local in ImportTable.of(module).bindings:
            self.names.setdefault(local, []).append(_UNKNOWN)
        for node in index.nodes:
            t = type(node)
            if t is cst.Assign:
                for target in node.targets:  # type: ignore[attr-defined]
                    self._bind(target.target, node.value)  # type: ignore[attr-defined]
            elif t is cst.AnnAssign and node.value is not None:  # type: ignore[attr-defined]
                self._bind(node.target, node.value)  # type: ignore[attr-defined]
            elif t is cst.NamedExpr:
                self._bind(node.target, node.value)  # type: ignore[attr-defined]
            elif t is cst.AugAssign or t is cst.For or t is cst.CompFor:
                self._bind(node.target, _UNKNOWN)  # type: ignore[attr-defined]
            elif t is cst.AsName:
                self._bind(node.name, _UNKNOWN)  # type: ignore[attr-defined]
            elif t is cst.Param:
                ann = node.annotation  # type: ignore[attr-defined]
                declared = ann is not None and isinstance(ann.annotation, cst.Name) and ann.annotation.value == "bool"
                self.names.setdefault(node.name.value, []).append(  # type: ignore[attr-defined]
                    cst.Name("True") if declared else _UNKNOWN)
            elif t is cst.FunctionDef or t is cst.ClassDef:
                self.names.setdefault(node.name.value, []).append(_UNKNOWN)  # type: ignore[attr-defined]
        self.compared_to_text: Set[str] = set()  # dotted names compared with a string literal somewhere
        for node in index.nodes:
            if type(node) is cst.Comparison:
                self._note_text_comparison(node)  # type: ignore[arg-type]
        for call in index.calls:
            if isinstance(call.func, cst.Attribute) and call.func.attr.value == "add_argument":
                self._declare(call)

    @classmethod
    def of(cls, module: cst.Module) -> "BoolFacts":
        """The (cached, per tree) facts of `module`."""
        tables = ModuleIndex.of(module).tables
        facts = tables.get("bool_exprs.BoolFacts")
        if facts is None:
            facts = tables["bool_exprs.BoolFacts"] = cls(module)
        return facts  # type: ignore[return-value]

    def _bind(self, target: cst.BaseExpression, value: Optional[cst.BaseExpression]) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            for el in target.elements:
                self._bind(el.value, _UNKNOWN)
        elif isinstance(target, cst.StarredElement):
            self._bind(target.value, _UNKNOWN)
        elif isinstance(target, cst.Name):
            self.names.setdefault(target.value, []).append(value)
        elif isinstance(target, cst.Attribute):
            self.attrs.setdefault(target.attr.value, []).append(value)

    def _note_text_comparison(self, cmp: cst.Comparison) -> None:
        sides = [cmp.left] + [t.comparator for t in cmp.comparisons]
        if any(isinstance(x, (cst.SimpleString, cst.ConcatenatedString)) for x in sides):
            for x in sides:
                name = dotted_name(x)
                if name:
                    self.compared_to_text.add(name)

    def _declare(self, call: cst.Call) -> None:
        options = [literal_string(a.value) for a in call.args if a.keyword is None]
        options = [o for o in options if o]
        if not options:
            return
        longs = [o for o in options if o.startswith("--")]
        dest = (longs or options)[0].lstrip("-").replace("-", "_")
        action: Optional[str] = None
        default_ok = True
        for a in call.args:
            if a.keyword is None:
                continue
            if a.keyword.value == "dest":
                dest = literal_string(a.value) or dest
            elif a.keyword.value == "action":
                action = literal_string(a.value) or (
                    "BooleanOptionalAction" if (dotted_name(a.value) or "").endswith("BooleanOptionalAction") else None)
            elif a.keyword.value == "default":
                default_ok = isinstance(a.value, cst.Name) and a.value.value in ("True", "False")
        if action == "BooleanOptionalAction":
            # without a bool default the flag is None until given
            is_bool = default_ok and any(a.keyword is not None and a.keyword.value == "default" for a in call.args)
        else:
            is_bool = action in _BOOL_ACTIONS and default_ok
        self.flags[dest] = self.flags.get(dest, True) and is_bool

    # -- the predicate ----------------------------------------------------------------------------
    def provable(self, e: cst.BaseExpression, _seen: Optional[Set[str]] = None) -> bool:
        """Whether `e` always evaluates to a bool."""
        seen = _seen if _seen is not None else set()
        if isinstance(e, cst.Name):
            if e.value in ("True", "False"):
                return True
            return self._all_bool(self.names.get(e.value), "n:" + e.value, seen)
        if isinstance(e, (cst.Comparison,)):
            return True
        if isinstance(e, cst.UnaryOperation):
            return isinstance(e.operator, cst.Not)
        if isinstance(e, cst.BooleanOperation):
            return self.provable(e.left, seen) and self.provable(e.right, seen)
        if isinstance(e, cst.IfExp):
            return self.provable(e.body, seen) and self.provable(e.orelse, seen)
        if isinstance(e, cst.Call):
            name = dotted_name(e.func) or ""
            if name in _BOOL_FUNCS:
                return True
            return isinstance(e.func, cst.Attribute) and e.func.attr.value in _BOOL_METHODS
        if isinstance(e, cst.Attribute):
            attr = e.attr.value
            if not self.flags.get(attr, False):
                return False
            return self._all_bool(self.attrs.get(attr, []), "a:" + attr, seen, allow_empty=True)
        return False

    def shown_non_bool(self, e: cst.BaseExpression) -> bool:
        """Whether the module shows that `e` can evaluate to something other than a bool: a literal
        string, number or None; an argparse option declared here without a bool action; a name or
        attribute compared with a string literal somewhere in the module (`args.fp16 != "O0"`); an
        `and`/`or`/`if-else` that can hand back such an operand. Unknowns (a flag parsed in another
        file) are not shown, so a lint built on this stays quiet about them."""
        if isinstance(e, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString, cst.Integer, cst.Float)):
            return True
        if isinstance(e, cst.Name):
            if e.value == "None":
                return True
            if e.value in self.compared_to_text:
                return True
            values = self.names.get(e.value) or []
            return any(v is not None and not isinstance(v, cst.Name) and self.shown_non_bool(v) for v in values)
        if isinstance(e, cst.Attribute):
            name = dotted_name(e)
            if name and name in self.compared_to_text:
                return True
            return self.flags.get(e.attr.value) is False
        if isinstance(e, cst.BooleanOperation):
            return self.shown_non_bool(e.left) or self.shown_non_bool(e.right)
        if isinstance(e, cst.IfExp):
            return self.shown_non_bool(e.body) or self.shown_non_bool(e.orelse)
        return False

    def _all_bool(self, values: Optional[List[Optional[cst.BaseExpression]]], key: str, seen: Set[str],
                  allow_empty: bool = False) -> bool:
        if not values:
            return allow_empty
        if key in seen:
            return True  # a cycle adds no non-bool value of its own
        seen.add(key)
        try:
            return all(v is not None and self.provable(v, seen) for v in values)
        finally:
            seen.discard(key)


def provably_bool(e: cst.BaseExpression, module: cst.Module) -> bool:
    """Whether `e`, an expression of `module`, always evaluates to a bool."""
    return BoolFacts.of(module).provable(e)


def shown_non_bool(e: cst.BaseExpression, module: cst.Module) -> bool:
    """Whether `module` shows that `e` may evaluate to a non-bool (see `BoolFacts.shown_non_bool`)."""
    return BoolFacts.of(module).shown_non_bool(e)


def as_bool(e: Optional[cst.BaseExpression], module: cst.Module) -> Optional[cst.BaseExpression]:
    """`e`, wrapped in `bool(...)` unless it is provably a bool already (None stays None)."""
    if e is None or provably_bool(e, module):
        return e
    return cst.Call(cst.Name("bool"), [cst.Arg(e.with_changes(lpar=[], rpar=[]))])
