"""The reads of an apex flag (`has_apex`, `APEX_AVAILABLE`) that fold to True once its `try` goes,
and the flags that must stay (rebound, deleted, named in a string): from the index when scoping
cannot matter, else from libcst's scope analysis."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Set, Tuple

import libcst as cst
from libcst.metadata import ScopeProvider

from .apex_uses import scope_id
from .index import ModuleIndex
from .walk import iter_nodes


def foldable_flag_reads(wrapper: cst.MetadataWrapper, flags: Set[str], uses: Dict[str, List[cst.Name]],
                removed: Sequence[cst.CSTNode], exact: bool = False
                ) -> Tuple[List[cst.Name], Dict[str, Optional[cst.CSTNode]]]:
    """The reads of `flags` that fold to True once `removed` (their definitions and guards) goes, and the
    flags that must stay, each with the removed statement that defines it (to report at).

    A flag must stay when a read cannot become `True` (`del flag`, a string annotation), when a scope
    binds it by more than the removed statements (`global flag; flag = ...`, `flag += ...`), or when a
    string names it (`__all__`, `globals()["flag"]`). Reads of another binding of the same name (a
    parameter, a class attribute) are not the flag's.

    The common case, module-level flags whose name nothing else binds, is answered from the index
    (`_plain_flag_reads`); the rest, or `exact`, take libcst's scope analysis (costly: it walks the
    whole module with several metadata visitors).
    """
    index = ModuleIndex.of(wrapper.module)
    named = set()
    for s in index.strings:
        try:
            named.add(s.evaluated_value)
        except Exception:  # pragma: no cover - a string libcst cannot evaluate names nothing
            pass
    stuck = flags & named
    if not any(uses.get(flag) for flag in flags - stuck):
        return [], _first_definitions(stuck, removed)
    inside = {id(n) for stmt in removed for n in iter_nodes(stmt)}
    if not exact:
        plain = _plain_flag_reads(index, flags - stuck, inside, removed)
        if plain is not None:
            return plain, _first_definitions(stuck, removed)
    scopes = {scope for scope in wrapper.resolve(ScopeProvider).values() if scope is not None}
    reads: List[cst.Name] = []
    for flag in sorted(flags - stuck):
        ours = {a for scope in scopes for a in scope.assignments[flag] if id(a.node) in inside}
        accesses = [a for scope in scopes for a in scope.accesses[flag]
                    if id(a.node) not in inside and not ours.isdisjoint(a.referents)]
        if any(a not in ours for own in ours for a in own.scope.assignments[flag]) or any(
                not ours.issuperset(a.referents) or not isinstance(a.node, cst.Name) or _deleted(a.node, index)
                for a in accesses):
            stuck.add(flag)
        else:
            reads.extend(a.node for a in accesses)  # type: ignore[misc]
    return reads, _first_definitions(stuck, removed)


# (node type, field): a Name in that field binds (or declares, or deletes) the name.
_BINDING_SLOTS = {(cst.AssignTarget, "target"), (cst.AnnAssign, "target"), (cst.AugAssign, "target"),
                  (cst.For, "target"), (cst.CompFor, "target"), (cst.NamedExpr, "target"), (cst.Del, "target"),
                  (cst.AsName, "name"), (cst.FunctionDef, "name"), (cst.ClassDef, "name"), (cst.Param, "name"),
                  (cst.ImportAlias, "name"), (cst.NameItem, "name"), (cst.MatchAs, "name"),
                  (cst.MatchStar, "name"), (cst.MatchMapping, "rest")}
_BINDING_SLOTS |= {(getattr(cst, t), "name") for t in ("TypeVar", "TypeVarTuple", "ParamSpec", "TypeAlias")
                   if hasattr(cst, t)}
# a Name in one of these fields is no reference at all
_ATTRIBUTE_SLOTS = {(cst.Attribute, "attr"), (cst.Arg, "keyword"), (cst.MatchKeywordElement, "key")}
_TARGET_PARTS = (cst.Element, cst.StarredElement, cst.Tuple, cst.List)


def _name_role(name: cst.Name, index: ModuleIndex) -> str:
    """"read", "attribute" (no reference: `x.name`, `f(name=...)`) or "other" (a binding, a
    declaration, a deletion or a part of an import)."""
    child: cst.CSTNode = name
    parent = index.parent(name)
    while isinstance(parent, _TARGET_PARTS):  # `a, (flag, b) = ...`: the slot is the outer target's
        child, parent = parent, index.parent(parent)
    for t, field in _BINDING_SLOTS:
        if type(parent) is t and getattr(parent, field) is child:
            return "other"
    if child is name and any(type(parent) is t and getattr(parent, f) is name for t, f in _ATTRIBUTE_SLOTS):
        return "attribute"
    if any(isinstance(a, (cst.Import, cst.ImportFrom)) for a in index.ancestors(name)):
        return "other"
    return "read"


def _plain_flag_reads(index: ModuleIndex, flags: Set[str], inside: Set[int], removed: Sequence[cst.CSTNode]
                      ) -> Optional[List[cst.Name]]:
    """The flags' reads, when scoping cannot matter: the flags are defined at module level and their
    names are bound, declared, deleted or imported nowhere else, and no string holds them (a string
    annotation reads them). Every other Name of that value then reads the module binding. None when
    that does not hold (the caller asks libcst's scope analysis)."""
    if any(scope_id(stmt, index) != 0 for stmt in removed):
        return None
    if any(flag in s.value for s in index.strings for flag in flags):
        return None
    reads: List[cst.Name] = []
    for n in index.names:
        if n.value not in flags or id(n) in inside:
            continue
        role = _name_role(n, index)
        if role == "other":
            return None
        if role == "read":
            reads.append(n)
    return reads


def _first_definitions(flags: Set[str], removed: Sequence[cst.CSTNode]) -> Dict[str, Optional[cst.CSTNode]]:
    """Each flag with the first of the removed statements that assigns it (None when none does)."""
    out: Dict[str, Optional[cst.CSTNode]] = dict.fromkeys(flags)
    for stmt in removed:
        for n in iter_nodes(stmt):
            if isinstance(n, cst.AssignTarget) and isinstance(n.target, cst.Name) and \
                    n.target.value in flags and out[n.target.value] is None:
                out[n.target.value] = stmt
    return out


def _deleted(name: cst.Name, index: ModuleIndex) -> bool:
    """Whether `name` is a target of `del` (alone or in a tuple or list)."""
    node: Optional[cst.CSTNode] = index.parent(name)
    while isinstance(node, (cst.Element, cst.StarredElement, cst.Tuple, cst.List)):
        node = index.parent(node)
    return isinstance(node, cst.Del)
