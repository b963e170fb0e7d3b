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


# ---- likely causes of a GradScaler divergence --------------------------------------------------------

_CLIPS = ("clip_grad_norm_", "clip_grad_value_", "clip_grad_norm")


class _ScopeEvents(ast.NodeVisitor):
    """Per scope (module or function): the scaler/optimizer calls in source order, each with its if-branch path."""

    def __init__(self):
        self.scopes: List[list] = [[]]
        self.all: List[list] = [self.scopes[0]]
        self.path: tuple = ()
        self.scaler_names = set()
        self.optimizer_names = set()
        self.scale_names = set()  # names bound to a scaler's get_scale()

    def visit_FunctionDef(self, node):
        saved_path, self.path = self.path, ()
        scope: list = []
        self.scopes.append(scope)
        self.all.append(scope)
        for stmt in node.body:
            self.visit(stmt)
        self.scopes.pop()
        self.path = saved_path

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_If(self, node):
        self.visit(node.test)
        saved = self.path
        for side, body in (("body", node.body), ("orelse", node.orelse)):
            self.path = saved + ((id(node), side),)
            for stmt in body:
                self.visit(stmt)
        self.path = saved

    def visit_Assign(self, node):
        if "get_scale" in ast.dump(node.value):
            self.scale_names.update(t.id for t in node.targets if isinstance(t, ast.Name))  # `s = scaler.get_scale()`
        if isinstance(node.value, ast.Call):
            func = _dotted(node.value.func)
            for t in node.targets:
                name = _dotted(t).split(".")[-1]
                if func.endswith("GradScaler"):
                    self.scaler_names.add(name)
                elif ".optim." in "." + func or func.startswith("optim."):
                    self.optimizer_names.add(name)
        self.generic_visit(node)

    def visit_Call(self, node):
        self.generic_visit(node)  # inner calls first: scaler.scale(loss) comes before .backward()
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name in _CLIPS and any("get_scale" in ast.dump(a) or any(
                isinstance(n, ast.Name) and n.id in self.scale_names for n in ast.walk(a))
                for a in node.args[1:] + node.keywords):
            return  # its threshold is scaled too (`max_norm * scaler.get_scale()`, A2A148): exact on scaled grads
        if isinstance(func, ast.Attribute):
            recv = _dotted(func.value).split(".")[-1]
            arg = _dotted(node.args[0]).split(".")[-1] if node.args else ""
            self.scopes[-1].append((func.attr, recv, arg, node.lineno, self.path))
        elif isinstance(func, ast.Name):
            self.scopes[-1].append((func.id, "", "", node.lineno, self.path))


def _exclusive(p1: tuple, p2: tuple) -> bool:
    sides = dict(p1)
    return any(k in sides and sides[k] != side for k, side in p2)


def _scope_causes(path: str, events: list, scalers: set, optimizers: set) -> List[str]:
    found = []
    scaler_ev = [e for e in events if e[1] in scalers]
    scales = [e for e in scaler_ev if e[0] == "scale"]
    if not scales:
        return found
    steps = [e for e in scaler_ev if e[0] == "step"]
    for i, ev in enumerate(events):
        name, recv, _, line, bpath = ev
        if name in _CLIPS:
            before = [e for e in scales if e[3] <= line and not _exclusive(e[4], bpath)]
            if not before:
                continue
            last = before[-1]
            unscaled = any(e[0] == "unscale_" and e[1] in scalers and last[3] <= e[3] <= line
                           and not _exclusive(e[4], bpath) for e in events)
            # the other side of this `if` unscales: this side is the mode whose scaler is off (fp32)
            other_side = any(e[0] == "unscale_" and e[1] in scalers and last[3] <= e[3] <= line
                             and _exclusive(e[4], bpath) for e in events)
            if not unscaled and not other_side and any(e[3] >= line for e in steps):
                found.append("%s:%d: %s clips the still scaled gradients: call %s.unscale_(optimizer) before it "
                             "in the same step" % (path, line, name, last[1]))
        elif name == "step" and recv not in scalers and (recv in optimizers or "optim" in recv.lower()):
            live_scales = [e for e in scales if e[3] <= line and not _exclusive(e[4], bpath)]
            if not live_scales:
                continue
            twins = [e for e in steps if e[2] == recv and not _exclusive(e[4], bpath)]
            if not steps:
                found.append("%s:%d: %s.step() is called directly while %s scales the loss: step through "
                             "%s.step(%s), which unscales the gradients and skips inf/NaN steps" % (
                                 path, line, recv, live_scales[0][1], live_scales[0][1], recv))
            elif twins:
                found.append("%s:%d: %s is stepped twice: %s.step(%s) (line %d) and %s.step()" % (
                    path, line, recv, twins[0][1], recv, twins[0][3], recv))
    return found


def likely_causes(entry_path: str) -> List[str]:
    """Findings in the entry and its local imports that explain a GradScaler divergence: a clip of scaled
    gradients (no unscale_ before it), a scaler with scale() but no update(), an optimizer stepped directly."""
    folder = os.path.dirname(os.path.abspath(entry_path))
    todo, seen, parsed = [os.path.abspath(entry_path)], set(), []
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
        v = _ScopeEvents()
        v.visit(tree)
        parsed.append((os.path.relpath(path, folder), v))
        todo.extend(_local_imports(tree, folder))
    scalers = set().union(*(v.scaler_names for _, v in parsed)) if parsed else set()
    optimizers = set().union(*(v.optimizer_names for _, v in parsed)) if parsed else set()
    findings: List[str] = []
    updated = {e[1] for _, v in parsed for scope in v.all for e in scope if e[0] == "update"}
    for rel, v in parsed:
        for scope in v.all:
            findings.extend(_scope_causes(rel, scope, scalers, optimizers))
            for name, recv, _, line, _ in scope:
                if name == "scale" and recv in scalers and recv not in updated:
                    findings.append("%s:%d: %s.scale() is used but %s.update() is never called: the loss scale "
                                    "never adapts, and the next step's unscale_()/step() raises" % (
                                        rel, line, recv, recv))
                    updated.add(recv)  # once per scaler
    return findings
