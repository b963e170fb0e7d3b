"""A trainer that calls `amp.initialize` again before `amp.load_state_dict` on restore (A2A416).

apex's restore recipe re-runs `amp.initialize` on the objects it already returned, then loads the
loss-scaler state: `self.model, self.optimizer = amp.initialize(self.model, self.optimizer,
opt_level=self.opt_level)` followed by `amp.load_state_dict(ckpt["amp"])`. The re-initialization makes
fresh loss scalers that the load then overwrites, so under native AMP it has no counterpart: the
GradScaler made where the first `amp.initialize` was (kept on `self`) is the one the load restores.
Such a second call is removed when all of this holds, else the module keeps its several-initialize
refusal (A2A117):
- the first call keeps its results on `self` in a method of the same class, and the second call, in
  another method of that class, assigns exactly those targets from exactly those objects;
- its keyword arguments are the first call's (`opt_level=opt_level` in `__init__`, with
  `self.opt_level = opt_level` there, matches `opt_level=self.opt_level`);
- the optimizers it passes are made anew earlier in its block (`self.optimizer = make_optimizer(...)`):
  apex refuses an optimizer that went through `amp.initialize` before;
- the same block goes on, later, to call `amp.load_state_dict(...)`.
"""
from __future__ import annotations

from typing import Dict, List, Optional

import libcst as cst

from .names import norm_code


def removable_reinitializations(analysis, inits: List) -> List:
    """The sites among `inits` (amp.initialize sites of the amp codemod's analysis) that re-run apex's
    initialize before a state load and go away under native AMP; [] unless all but one are."""
    if len(inits) < 2:
        return []
    for primary in inits:
        rest = [s for s in inits if s is not primary]
        if all(_reinitializes(analysis, primary, s) for s in rest):
            return rest
    return []


def _class_of(analysis, func: Optional[cst.FunctionDef]) -> Optional[cst.ClassDef]:
    if func is None:
        return None
    parent = analysis.index.parent(func)
    if isinstance(parent, cst.IndentedBlock):
        parent = analysis.index.parent(parent)
    return parent if isinstance(parent, cst.ClassDef) else None


def _single_assign(site) -> Optional[cst.Assign]:
    stmt = site.stmt
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign) \
            and stmt.body[0].value is site.call and len(stmt.body[0].targets) == 1:
        return stmt.body[0]
    return None


def _target_codes(assign: cst.Assign) -> Optional[List[str]]:
    t = assign.targets[0].target
    elements = [e.value for e in t.elements] if isinstance(t, (cst.Tuple, cst.List)) else [t]
    if not all(isinstance(e, cst.Attribute) and isinstance(e.value, cst.Name) and e.value.value == "self"
               for e in elements):
        return None
    return [norm_code(e) for e in elements]


def _keywords(call: cst.Call) -> Optional[Dict[str, cst.BaseExpression]]:
    out: Dict[str, cst.BaseExpression] = {}
    for a in call.args:
        if a.star:
            return None
        if a.keyword is not None:
            out[a.keyword.value] = a.value
    return out


def _self_copies(func: cst.FunctionDef) -> Dict[str, str]:
    """`self.x = y` statements of `func`'s own body (top level): "self.x" -> "y"."""
    out: Dict[str, str] = {}
    if not isinstance(func.body, cst.IndentedBlock):
        return out
    for stmt in func.body.body:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Assign) and len(small.targets) == 1 and \
                        isinstance(small.targets[0].target, cst.Attribute) and isinstance(small.value, cst.Name):
                    out[norm_code(small.targets[0].target)] = small.value.value
    return out


def _reinitializes(analysis, primary, site) -> bool:
    if primary.func is None or site.func is None or primary.func is site.func:
        return False
    cls = _class_of(analysis, primary.func)
    if cls is None or _class_of(analysis, site.func) is not cls:
        return False
    first, again = _single_assign(primary), _single_assign(site)
    if first is None or again is None:
        return False
    targets = _target_codes(first)
    if targets is None or _target_codes(again) != targets:
        return False
    positional = [a.value for a in site.call.args if a.keyword is None]
    if [norm_code(v) for v in positional] != targets:
        return False  # re-initializes other objects than the ones it assigns
    if len([a for a in primary.call.args if a.keyword is None]) != len(positional):
        return False
    kw_first, kw_again = _keywords(primary.call), _keywords(site.call)
    if kw_first is None or kw_again is None or set(kw_first) != set(kw_again):
        return False
    copies = _self_copies(primary.func)
    for k, v in kw_again.items():
        want = norm_code(kw_first[k])
        if norm_code(v) != want and copies.get(norm_code(v)) != want:
            return False
    return all(_assigned_before(analysis, site, t) for t in targets[1:]) and _load_follows(analysis, site)


def _assigned_before(analysis, site, code: str) -> bool:
    """Whether a statement before `site.stmt` in its block assigns `code` (`self.optimizer = ...`)."""
    block = analysis.index.parent(site.stmt)
    body = list(getattr(block, "body", ()))
    if site.stmt not in body:
        return False
    for stmt in body[:body.index(site.stmt)]:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Assign) and any(norm_code(t.target) == code for t in small.targets):
                    return True
    return False


def _load_follows(analysis, site) -> bool:
    """Whether a statement after `site.stmt` in its block calls `amp.load_state_dict(...)`."""
    block = analysis.index.parent(site.stmt)
    body = list(getattr(block, "body", ()))
    if site.stmt not in body:
        return False
    later = body[body.index(site.stmt) + 1:]
    for s in analysis.sites:
        if s.kind == "load_state_dict" and any(s.stmt is stmt for stmt in later):
            return True
    return False
