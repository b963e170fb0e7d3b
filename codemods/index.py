"""One traversal of a module that every codemod can share: parents, calls, names, definitions.

libcst visits are the expensive part of a codemod (a full walk of a 4,000-line file costs about as
much as parsing it). Codemods that need "every call", "every name" or "the parent of this node" ask
`ModuleIndex.of(module)` instead of walking the tree again; the index is built once per tree object
and reused by every codemod that sees the same tree.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Dict, List, Optional, Set

import libcst as cst


class ModuleIndex(cst.CSTVisitor):
    """Nodes of one module by kind, with a parent map (by identity)."""

    _cache: "OrderedDict[int, ModuleIndex]" = OrderedDict()  # id(module) -> index (which holds the module)
    _CACHE_SIZE = 8

    def __init__(self, module: cst.Module):
        super().__init__()
        self.module = module
        self.parents: Dict[int, cst.CSTNode] = {}
        self.calls: List[cst.Call] = []
        self.names: List[cst.Name] = []
        self.name_values: Set[str] = set()
        self.attr_values: Set[str] = set()
        self.functions: List[cst.FunctionDef] = []
        self.classes: List[cst.ClassDef] = []
        self.withs: List[cst.With] = []
        self.decorators: List[cst.Decorator] = []
        self.ifs: List[cst.If] = []
        self.tries: List[cst.Try] = []
        self.strings: List[cst.SimpleString] = []
        self.imports: List[cst.CSTNode] = []  # Import and ImportFrom nodes, anywhere
        self.tables: Dict[str, object] = {}  # ImportTable per module name (see names.ImportTable.of)
        self._stack: List[cst.CSTNode] = []
        module.visit(self)
        del self._stack

    @classmethod
    def of(cls, module: cst.Module) -> "ModuleIndex":
        """The index of `module`, built on first use."""
        idx = cls._cache.get(id(module))
        if idx is None or idx.module is not module:
            idx = cls(module)
            cls._cache[id(module)] = idx
            while len(cls._cache) > cls._CACHE_SIZE:
                cls._cache.popitem(last=False)
        else:
            cls._cache.move_to_end(id(module))
        return idx

    # -- traversal -----------------------------------------------------------------------------
    def on_visit(self, node: cst.CSTNode) -> bool:
        if self._stack:
            self.parents[id(node)] = self._stack[-1]
        self._stack.append(node)
        t = type(node)
        if t is cst.Call:
            self.calls.append(node)  # type: ignore[arg-type]
        elif t is cst.Name:
            self.names.append(node)  # type: ignore[arg-type]
            self.name_values.add(node.value)  # type: ignore[attr-defined]
        elif t is cst.Attribute:
            self.attr_values.add(node.attr.value)  # type: ignore[attr-defined]
        elif t is cst.FunctionDef:
            self.functions.append(node)  # type: ignore[arg-type]
        elif t is cst.ClassDef:
            self.classes.append(node)  # type: ignore[arg-type]
        elif t is cst.With:
            self.withs.append(node)  # type: ignore[arg-type]
        elif t is cst.Decorator:
            self.decorators.append(node)  # type: ignore[arg-type]
        elif t is cst.If:
            self.ifs.append(node)  # type: ignore[arg-type]
        elif t is cst.Try:
            self.tries.append(node)  # type: ignore[arg-type]
        elif t is cst.SimpleString:
            self.strings.append(node)  # type: ignore[arg-type]
        elif t is cst.Import or t is cst.ImportFrom:
            self.imports.append(node)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self._stack.pop()

    # -- queries -------------------------------------------------------------------------------
    def parent(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        return self.parents.get(id(node))

    def ancestors(self, node: cst.CSTNode):
        cur = self.parent(node)
        while cur is not None:
            yield cur
            cur = self.parent(cur)

    def contains(self, outer: cst.CSTNode, inner: cst.CSTNode) -> bool:
        """Whether `inner` is `outer` or lies inside it (by walking up, not down)."""
        if outer is inner:
            return True
        return any(a is outer for a in self.ancestors(inner))

    def enclosing_function(self, node: cst.CSTNode) -> Optional[cst.FunctionDef]:
        for a in self.ancestors(node):
            if isinstance(a, cst.FunctionDef):
                return a
        return None

    def calls_in(self, node: cst.CSTNode) -> List[cst.Call]:
        return [c for c in self.calls if self.contains(node, c)]


class _ParentMapping:
    """A read-only mapping node -> parent, shaped like libcst's ParentNodeProvider result."""

    def __init__(self, index: ModuleIndex):
        self._index = index

    def get(self, node: cst.CSTNode, default: Optional[cst.CSTNode] = None) -> Optional[cst.CSTNode]:
        return self._index.parents.get(id(node), default)

    def __getitem__(self, node: cst.CSTNode) -> cst.CSTNode:
        return self._index.parents[id(node)]

    def __contains__(self, node: cst.CSTNode) -> bool:
        return id(node) in self._index.parents


def parent_mapping(module: cst.Module) -> _ParentMapping:
    """A drop-in for `wrapper.resolve(ParentNodeProvider)` backed by the shared index."""
    return _ParentMapping(ModuleIndex.of(module))
