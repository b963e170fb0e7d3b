"""Facts from code already on torch.amp: module-level functions that take the GradScaler.

A helper migrated in an earlier run (or by hand) takes the scaler, `def train_step(loss, optimizer,
scaler)`, while a caller elsewhere may still call it from apex code that holds `amp.initialize`.
The amp codemod publishes facts only for functions it changes, so on a rerun the caller would not
know the helper wants the scaler, and its `amp.initialize` stayed (A2A124). These facts, read from the
stdlib AST without libcst, tell it: the caller's migration then passes `scaler=scaler`.

A parameter counts when its name holds `scaler` and the function calls `.scale(...)` on it, the one
call every GradScaler backward makes.
"""
from __future__ import annotations

import ast
from typing import Dict, Iterator, Optional, Tuple

from .base import RepoFacts, facts_key

KEYWORD_ONLY = -1  # the slot of a keyword-only scaler parameter


def may_have_helpers(data: bytes) -> bool:
    """False when the bytes alone show `scaler_helpers` finds nothing (a run asks of every file)."""
    return b".scale(" in data and b"scaler" in data


def scaler_helpers(data: bytes) -> Tuple[Optional[str], Dict[str, int]]:
    """(parameter name, {function: its slot}) of the module-level functions in `data` that call
    `.scale(...)` on a parameter named like a scaler. The slot is the parameter's position among the
    positional ones, or KEYWORD_ONLY. Functions using another parameter name than the first found are
    left out: a module publishes one name (`RepoFacts.scaler_params`)."""
    if not may_have_helpers(data):
        return None, {}
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None, {}
    name: Optional[str] = None
    out: Dict[str, int] = {}
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        found = _scaler_parameter(node)
        if found is None or (name is not None and found[0] != name):
            continue
        name = found[0]
        out[node.name] = found[1]
    return name, out


def _scaler_parameter(func: ast.AST) -> Optional[Tuple[str, int]]:
    args: ast.arguments = func.args  # type: ignore[attr-defined]
    positional = [a.arg for a in args.posonlyargs + args.args]
    slots = {p: i for i, p in enumerate(positional) if "scaler" in p}
    slots.update({a.arg: KEYWORD_ONLY for a in args.kwonlyargs if "scaler" in a.arg})
    if not slots:
        return None
    for node in _nodes(func):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "scale" \
                and isinstance(node.func.value, ast.Name) and node.func.value.id in slots:
            return node.func.value.id, slots[node.func.value.id]
    return None


def _nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """The nodes of `tree`, depth first, the last child first."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for name in node._fields:
            if name == "ctx":
                continue
            value = getattr(node, name, None)
            if type(value) is list:
                stack.extend([v for v in value if isinstance(v, ast.AST)])
            elif isinstance(value, ast.AST):
                stack.append(value)


def native_facts(data: bytes, path: str, module_name: str) -> RepoFacts:
    """The facts a file on torch.amp publishes: its scaler helpers, under the same key the amp codemod
    uses for the functions it changes (`root::module`)."""
    facts = RepoFacts()
    if not module_name:
        return facts
    param, helpers = scaler_helpers(data)
    if param is None or not helpers:
        return facts
    key = facts_key(path, module_name)
    facts.scaler_functions[key] = sorted(helpers)
    facts.scaler_params[key] = param
    facts.scaler_slots[key] = dict(helpers)
    return facts
