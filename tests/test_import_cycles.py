"""No import cycles among the modules of migrate/ and codemods/.

Every import counts, at module level and inside functions (a lazy import is still a cycle for a reader
following one module into the next); only the imports under `if TYPE_CHECKING:` (annotations) do not,
nor does a module's import of its own package (`from . import __version__`): Python runs the package's
`__init__` before any of its modules anyway, so that edge adds no order a reader must follow.
"""
from __future__ import annotations

import ast
import os
from typing import Dict, List, Optional, Set

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("migrate", "codemods")


def _modules() -> Dict[str, str]:
    """Dotted module name -> file, for every .py file under the packages."""
    out: Dict[str, str] = {}
    for pkg in PACKAGES:
        for folder, dirs, files in os.walk(os.path.join(ROOT, pkg)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            if "__init__.py" not in files:
                dirs[:] = []
                continue
            parts = os.path.relpath(folder, ROOT).split(os.sep)
            for name in sorted(files):
                if name.endswith(".py"):
                    stem = name[:-3]
                    out[".".join(parts if stem == "__init__" else parts + [stem])] = os.path.join(folder, name)
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> List[ast.stmt]:
    """Every import statement of the tree, at any depth, except those under `if TYPE_CHECKING:`."""
    found: List[ast.stmt] = []

    def walk(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.orelse:
                    walk_stmt(stmt)
                continue
            walk_stmt(child)

    def walk_stmt(node: ast.AST) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        walk(node)

    walk(tree)
    return found


def _base(module: str, is_package: bool, node: ast.ImportFrom) -> Optional[str]:
    """The module a `from X import ...` reads from, made absolute."""
    if not node.level:
        return node.module
    parts = module.split(".") if is_package else module.split(".")[:-1]
    if node.level > 1:
        parts = parts[:len(parts) - (node.level - 1)]
    if not parts:
        return None
    return ".".join(parts + ([node.module] if node.module else []))


def _graph() -> Dict[str, Set[str]]:
    modules = _modules()
    graph: Dict[str, Set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        is_package = path.endswith("__init__.py")
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), path)
        for node in _imports(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = _base(module, is_package, node)
                if base is None:
                    continue
                targets = [base + "." + a.name if base + "." + a.name in modules else base for a in node.names]
            for target in targets:
                if target in modules and target != module and not module.startswith(target + "."):
                    graph[module].add(target)
    return graph


def _cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    out: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_sees_the_imports_that_matter():
    graph = _graph()
    assert "migrate.pipeline" in graph["migrate.engine"]
    assert "migrate.source_rewrite" in graph["migrate.notebook"]  # a function-level import counts
    assert "migrate.results" not in graph["migrate.formats"]  # only under `if TYPE_CHECKING:`


def test_no_module_imports_itself_through_others():
    cycles = _cycles(_graph())
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)
