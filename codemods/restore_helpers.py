"""Checkpoint helpers that only save or restore the state of what they are given.

`restart_from_checkpoint(path, run_variables=None, **kwargs)` loops over its keyword arguments and
calls `value.load_state_dict(checkpoint[key])` on each; `load_checkpoint(path, model, amp=None)` calls
`amp.load_state_dict(...)` on its parameter. Such a helper works as well with a GradScaler as with the
apex amp module, since a GradScaler has `state_dict()` and `load_state_dict(sd)`: a call passing
`amp=amp` may pass `amp=scaler` instead. Read from the stdlib AST (no libcst), for the helpers of the
run's other modules too (the engine publishes them as repo facts: `restore_facts`).

A value counts as only checkpointed when every read of it is the receiver of `.state_dict()` or of
`.load_state_dict(one argument)`, an `is None` test or a truth test; a `load_state_dict` call with more
arguments (`strict=False`) counts only inside a `try` whose `except TypeError` handler makes the plain
one-argument call (which a GradScaler accepts).
"""
from __future__ import annotations

import ast
import os
from typing import Any, Dict, Hashable, List, Optional, Sequence, Tuple

from .base import RepoFacts, facts_index, facts_key

FACT_PREFIX = "restore_helpers:"  # RepoFacts.extra key: FACT_PREFIX + facts_key -> {function: spec}
_STATE_METHODS = ("state_dict", "load_state_dict")


def may_have_restore_helpers(data: bytes) -> bool:
    """False when the bytes alone show `restore_helpers` finds nothing."""
    return b"state_dict(" in data and b"def " in data


def restore_helpers(data: bytes) -> Dict[str, Dict[str, Any]]:
    """{function: spec} of the module-level functions in `data` that only checkpoint some of their
    arguments. spec: "positional" (the positional parameters in order), "params" ({parameter: {"restores":
    bool, "key": checkpoint key or None}} of the parameters only checkpointed) and "kwargs" (None, or
    {"restores": bool, "key_is_keyword": bool} when every `**kwargs` value is only checkpointed)."""
    if not may_have_restore_helpers(data):
        return {}
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return {}
    out: Dict[str, Dict[str, Any]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            spec = _helper_spec(node)
            if spec is not None:
                out[node.name] = spec
    return out


def restore_facts(data: bytes, path: str, module_name: str) -> RepoFacts:
    """The facts a file publishes about its checkpoint helpers."""
    facts = RepoFacts()
    if not module_name:
        return facts
    # published even when empty: the module was read, so a callee missing from it is no helper
    facts.extra[FACT_PREFIX + facts_key(path, module_name)] = restore_helpers(data)
    return facts


def helpers_in_facts(facts: RepoFacts) -> Dict[str, Dict[str, Dict[str, Any]]]:
    """{facts key: {function: spec}} of the checkpoint helpers the run's facts hold."""
    return {k[len(FACT_PREFIX):]: v for k, v in facts.extra.items() if k.startswith(FACT_PREFIX)}


class _HelperKeys:
    """The helper facts keys of `RepoFacts.extra` by module name and by the path `root/mod/...` they name."""

    def __init__(self, keys: Tuple[Hashable, ...]):
        self.by_module: Dict[str, List[Tuple[int, str]]] = {}
        self.by_path: Dict[str, List[Tuple[int, str]]] = {}
        for i, k in enumerate(keys):
            if not (isinstance(k, str) and k.startswith(FACT_PREFIX)):
                continue
            key = k[len(FACT_PREFIX):]
            root, _, mod = key.rpartition("::")
            self.by_module.setdefault(mod, []).append((i, key))
            if root:
                self.by_path.setdefault(os.path.join(root, *mod.split(".")), []).append((i, key))


def helpers_for_modules(facts: RepoFacts, modules: Sequence[str], importer_root: str
                        ) -> Dict[str, Dict[str, Dict[str, Any]]]:
    """The part of `helpers_in_facts` (same order) whose keys may be one of `modules` as a file of
    `importer_root` imports them: the module name matches, or the path does (`records.same_file`)."""
    index = facts_index("restore_helpers.keys", facts.extra, _HelperKeys)
    found = set()
    for module in modules:
        found.update(index.by_module.get(module, ()))
        if importer_root:
            found.update(index.by_path.get(os.path.join(importer_root, *module.split(".")), ()))
    return {key: facts.extra[FACT_PREFIX + key] for _, key in sorted(found)}


def argument_spec(spec: Dict[str, Any], keyword: Optional[str], position: int) -> Optional[Dict[str, Any]]:
    """What the helper does with the argument passed under `keyword` (or at `position`): the use
    spec ({"restores", "key"}) when it only checkpoints it, else None."""
    if keyword is None:
        pos = spec["positional"]
        if position >= len(pos):
            return None
        keyword = pos[position]
    if keyword in spec["params"]:
        return spec["params"][keyword]
    if keyword not in spec["positional"] and keyword not in spec["kwonly"] and spec["kwargs"] is not None:
        kw = spec["kwargs"]
        return {"restores": kw["restores"], "key": keyword if kw["key_is_keyword"] else None}
    return None


# -- the analysis ------------------------------------------------------------------------------------

def _helper_spec(func: ast.AST) -> Optional[Dict[str, Any]]:
    args: ast.arguments = func.args  # type: ignore[attr-defined]
    positional = [a.arg for a in args.posonlyargs + args.args]
    kwonly = [a.arg for a in args.kwonlyargs]
    parents = _parents(func)
    params: Dict[str, Dict[str, Any]] = {}
    for name in positional + kwonly:
        use = _only_checkpointed(func, name, parents)
        if use is not None:
            params[name] = {"restores": use[0], "key": use[1]}
    kwargs = None
    if args.kwarg is not None:
        kwargs = _kwargs_loop(func, args.kwarg.arg, parents)
    if not params and kwargs is None:
        return None
    return {"positional": positional, "kwonly": kwonly, "params": params, "kwargs": kwargs}


def _parents(root: ast.AST) -> Dict[int, ast.AST]:
    out: Dict[int, ast.AST] = {}
    for node in ast.walk(root):
        for child in ast.iter_child_nodes(node):
            out[id(child)] = node
    return out


def _reads(scope: ast.AST, name: str) -> Tuple[List[ast.Name], bool]:
    """The reads of `name` in `scope`, and whether it is also bound there (then nothing is proven)."""
    reads: List[ast.Name] = []
    bound = False
    for node in ast.walk(scope):
        if isinstance(node, ast.Name) and node.id == name:
            if isinstance(node.ctx, ast.Load):
                reads.append(node)
            else:
                bound = True
        elif isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
            bound = True
    return reads, bound


def _only_checkpointed(scope: ast.AST, name: str, parents: Dict[int, ast.AST],
                       loop: Optional[ast.AST] = None) -> Optional[Tuple[bool, Optional[str]]]:
    """(restores, checkpoint key) when every read of `name` in `scope` only checkpoints it."""
    reads, bound = _reads(scope, name)
    if bound and loop is None:
        return None
    if loop is not None:
        # the loop target is the one binding allowed
        stores = [n for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id == name
                  and not isinstance(n.ctx, ast.Load)]
        if any(parents.get(id(n)) is not loop and parents.get(id(parents.get(id(n)))) is not loop for n in stores):
            return None
    if not reads:
        return None
    restores = False
    keys: List[Optional[str]] = []
    methods = 0
    for r in reads:
        p = parents.get(id(r))
        if isinstance(p, ast.Attribute) and p.attr in _STATE_METHODS:
            call = parents.get(id(p))
            if not isinstance(call, ast.Call) or call.func is not p:
                return None
            if p.attr == "state_dict":
                if call.args or call.keywords:
                    return None
            else:
                if not _plain_load(call) and not _load_with_fallback(call, name, parents):
                    return None
                restores = True
                keys.append(_key_of(call.args[0]) if call.args else None)
            methods += 1
        elif isinstance(p, ast.Compare) and len(p.ops) == 1 and isinstance(p.ops[0], (ast.Is, ast.IsNot)) and \
                isinstance(p.comparators[0], ast.Constant) and p.comparators[0].value is None and p.left is r:
            continue
        elif _truth_test(r, p, parents):
            continue
        else:
            return None
    if not methods:
        return None
    key = keys[0] if keys and all(k == keys[0] for k in keys) else None
    return restores, key


def _truth_test(node: ast.AST, parent: Optional[ast.AST], parents: Dict[int, ast.AST]) -> bool:
    while isinstance(parent, (ast.BoolOp, ast.UnaryOp)) and (not isinstance(parent, ast.UnaryOp)
                                                              or isinstance(parent.op, ast.Not)):
        node, parent = parent, parents.get(id(parent))
    return isinstance(parent, (ast.If, ast.While, ast.IfExp, ast.Assert)) and getattr(parent, "test", None) is node


def _plain_load(call: ast.Call) -> bool:
    return len(call.args) == 1 and not call.keywords and not isinstance(call.args[0], ast.Starred)


def _load_with_fallback(call: ast.Call, name: str, parents: Dict[int, ast.AST]) -> bool:
    """`try: v.load_state_dict(sd, strict=False) except TypeError: v.load_state_dict(sd)`."""
    cur = parents.get(id(call))
    while cur is not None and not isinstance(cur, ast.Try):
        cur = parents.get(id(cur))
    if cur is None:
        return False
    for h in cur.handlers:  # type: ignore[attr-defined]
        caught = [h.type] if not isinstance(h.type, ast.Tuple) else list(h.type.elts)
        if h.type is not None and not any(isinstance(t, ast.Name) and t.id in ("TypeError", "Exception")
                                          for t in caught):
            continue
        for n in ast.walk(h):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "load_state_dict" \
                    and isinstance(n.func.value, ast.Name) and n.func.value.id == name and _plain_load(n):
                return True
    return False


def _key_of(arg: ast.AST) -> Optional[str]:
    if isinstance(arg, ast.Subscript) and isinstance(arg.slice, ast.Constant) and isinstance(arg.slice.value, str):
        return arg.slice.value
    return None


def _kwargs_loop(func: ast.AST, kw: str, parents: Dict[int, ast.AST]) -> Optional[Dict[str, Any]]:
    """`for key, value in kwargs.items(): ... value.load_state_dict(checkpoint[key])`: every read of
    `kwargs` is that loop's `.items()`, and the loop's value is only checkpointed."""
    reads, bound = _reads(func, kw)
    if bound or not reads:
        return None
    restores = False
    key_is_keyword = True
    for r in reads:
        attr = parents.get(id(r))
        call = parents.get(id(attr)) if attr is not None else None
        loop = parents.get(id(call)) if call is not None else None
        if not (isinstance(attr, ast.Attribute) and attr.attr == "items" and isinstance(call, ast.Call)
                and call.func is attr and not call.args and isinstance(loop, ast.For) and loop.iter is call):
            return None
        t = loop.target
        if not (isinstance(t, ast.Tuple) and len(t.elts) == 2 and all(isinstance(e, ast.Name) for e in t.elts)):
            return None
        key_name, value_name = t.elts[0].id, t.elts[1].id  # type: ignore[attr-defined]
        use = _only_checkpointed(loop, value_name, parents, loop=loop)
        if use is None:
            return None
        restores = restores or use[0]
        key_is_keyword = key_is_keyword and _loads_by_key(loop, value_name, key_name)
    return {"restores": restores, "key_is_keyword": key_is_keyword}


def _loads_by_key(loop: ast.AST, value: str, key: str) -> bool:
    """Whether every `value.load_state_dict(...)` in the loop reads `<checkpoint>[key]`."""
    for n in ast.walk(loop):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "load_state_dict" \
                and isinstance(n.func.value, ast.Name) and n.func.value.id == value:
            a = n.args[0] if n.args else None
            if not (isinstance(a, ast.Subscript) and isinstance(a.slice, ast.Name) and a.slice.id == key):
                return False
    return True
