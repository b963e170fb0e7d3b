"""Attribute reads on a fresh instance of a class of the same file, which never name another module's function.

`corpus = cls(*inputs)` in a classmethod (or `corpus = Corpus(...)`, `Corpus` a class defined in the
file), then `if corpus.train is not None:`: `.train` is the instance's (or its class's) attribute. It is
not the module-level `train` of another module of the run, which `method_refs.foreign_value_refs`
would otherwise count as a value use (and so keep `train` from taking the scaler). A class attribute
bound to that function inside the file reads the function by its own name, which is still counted.
"""
from __future__ import annotations

import ast
from typing import Set

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef)


def _module_classes(tree: ast.Module) -> Set[str]:
    """Names bound at module level only by a class statement."""
    classes: Set[str] = set()
    other: Set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            classes.add(node.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            other.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            other.update((a.asname or a.name).partition(".")[0] for a in node.names)
        elif isinstance(node, _SCOPES):
            other.add(node.name)
        elif isinstance(node, ast.arg):
            other.add(node.arg)
    return classes - other


def _is_classmethod(f: ast.AST) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "classmethod" for d in getattr(f, "decorator_list", ()))


def _instances_of(f: ast.AST, classes: Set[str]) -> Set[str]:
    """Local names of `f` whose every binding (in `f`, nested scopes included) is `v = C(...)`, C a class of
    the file or `cls` of a classmethod."""
    makers = set(classes) | ({"cls"} if _is_classmethod(f) else set())
    made: Set[int] = set()  # the Name targets of `v = C(...)`
    good: Set[str] = set()
    for node in ast.walk(f):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            v = node.value
            if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id in makers:
                made.add(id(node.targets[0]))
                good.add(node.targets[0].id)
    bad: Set[str] = set()
    for node in ast.walk(f):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)) and id(node) not in made:
            bad.add(node.id)  # any other binding: another value, a loop or tuple target, `with ... as`, `:=`
        elif isinstance(node, ast.arg):
            bad.add(node.arg)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            bad.update(node.names)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bad.update((a.asname or a.name).partition(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bad.add(node.name)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not f:
            bad.add(node.name)
    return good - bad


def local_instance_attributes(tree: ast.Module) -> Set[int]:
    """ids of the `ast.Attribute` loads `v.attr` whose `v` is, in its function, only ever a fresh
    instance of a class of this file (see the module docstring)."""
    classes = _module_classes(tree)
    out: Set[int] = set()
    for f in ast.walk(tree):
        if not isinstance(f, _SCOPES):
            continue
        names = _instances_of(f, classes)
        if not names:
            continue
        for node in ast.walk(f):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in names:
                out.add(id(node))
    return out
