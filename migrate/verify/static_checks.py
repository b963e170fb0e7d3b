"""Static checks of the migrated program that no loss curve can show (ast based)."""
from __future__ import annotations

import ast
import os
from typing import List


def _dotted(node) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _is_enabled_autocast(call) -> bool:
    if not isinstance(call, ast.Call) or not _dotted(call.func).split(".")[-1] == "autocast":
        return False
    for kw in call.keywords:
        if kw.arg == "enabled" and isinstance(kw.value, ast.Constant) and kw.value.value is False:
            return False
    return True


class _BackwardInAutocast(ast.NodeVisitor):
    def __init__(self, path):
        self.path = path
        self.depth = 0
        self.found: List[str] = []

    def visit_With(self, node):
        inside = any(_is_enabled_autocast(item.context_expr) for item in node.items)
        self.depth += inside
        for stmt in node.body:
            self.visit(stmt)
        self.depth -= inside

    visit_AsyncWith = visit_With

    def visit_FunctionDef(self, node):
        saved, self.depth = self.depth, 0
        self.generic_visit(node)
        self.depth = saved

    visit_AsyncFunctionDef = visit_Lambda = visit_FunctionDef

    def visit_Call(self, node):
        name = _dotted(node.func)
        if self.depth and (isinstance(node.func, ast.Attribute) and node.func.attr == "backward"):
            self.found.append("%s:%d: backward() inside an autocast region (run backward after the `with` block)"
                              % (self.path, node.lineno))
        elif self.depth and name.endswith("autograd.backward"):
            self.found.append("%s:%d: autograd.backward inside an autocast region" % (self.path, node.lineno))
        self.generic_visit(node)


def _local_imports(tree, folder) -> List[str]:
    out = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        for n in names:
            cand = os.path.join(folder, *n.split(".")) + ".py"
            if os.path.isfile(cand):
                out.append(cand)
    return out


def backward_inside_autocast(entry_path: str) -> List[str]:
    """Findings for `.backward()` lexically inside an enabled autocast block, in the entry and its local imports."""
    folder = os.path.dirname(os.path.abspath(entry_path))
    todo, seen, findings = [os.path.abspath(entry_path)], set(), []
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        try:
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), filename=path)
        except (OSError, SyntaxError, ValueError):
            continue
        v = _BackwardInAutocast(os.path.relpath(path, folder))
        v.visit(tree)
        findings.extend(v.found)
        todo.extend(_local_imports(tree, folder))
    return findings
