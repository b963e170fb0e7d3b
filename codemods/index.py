"""One traversal of a module that every codemod can share: parents, calls, names, positions, code.

libcst visits are the expensive part of a codemod: a visitor rebuilds every node it passes, so a
full walk of a 4,000-line file costs about as much as parsing it, and libcst's PositionProvider
costs twice that. The index is gathered instead during one code generation of the module (a
custom `CodegenState` whose per-node hooks record the parent stack, the nodes by kind and the
token span of every node), which gives the module's text, the parent map and the positions in
one pass at a fraction of that cost. `ModuleIndex.of(module)` builds it once per tree object and
every codemod that sees the same tree reuses it.

The codegen hooks are libcst internals (`codemods.libcst_private`); on the public route (another
libcst, or `APEX2AMP_PUBLIC_LIBCST=1`) the index is built by a visitor walk and PositionProvider,
with the same results.
"""
from __future__ import annotations

import bisect
import re
from collections import OrderedDict
from collections.abc import Mapping
from itertools import accumulate
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple

import libcst as cst
from libcst.metadata import CodePosition, CodeRange

from . import libcst_private
from .walk import Visitor

_CodegenState = libcst_private.CodegenState

_NEWLINE = re.compile(r"\r\n?|\n")

# Node kinds the index lists; Name and Attribute also feed the value sets.
_KINDS = {
    cst.Call: "calls", cst.Name: "names", cst.FunctionDef: "functions", cst.ClassDef: "classes",
    cst.With: "withs", cst.Decorator: "decorators", cst.If: "ifs", cst.Try: "tries",
    cst.SimpleString: "strings", cst.Import: "imports", cst.ImportFrom: "imports", cst.Attribute: "attributes",
}


class Positions(Mapping):
    """node -> CodeRange, the same ranges libcst's PositionProvider gives, computed on lookup.

    Spans are kept as token indices; a lookup turns them into lines and columns with a prefix sum
    of the token lengths and a bisect over the newline offsets of the text.
    """

    def __init__(self, spans: Dict[int, Tuple[int, int]], nodes: Dict[int, cst.CSTNode], tokens: List[str]):
        self._spans = spans
        self._nodes = nodes
        self._tokens = tokens
        self._offsets: Optional[List[int]] = None
        self._line_ends: List[int] = []
        self._cache: Dict[int, CodeRange] = {}

    def span(self, key: int) -> Optional[Tuple[int, int]]:
        """The token span of the node with this id, if it is in the tree."""
        return self._spans.get(key)

    def _position(self, token_index: int) -> CodePosition:
        if self._offsets is None:
            self._offsets = [0, *accumulate(map(len, self._tokens))]
            self._line_ends = [m.end() for m in _NEWLINE.finditer("".join(self._tokens))]
        offset = self._offsets[token_index]
        k = bisect.bisect_right(self._line_ends, offset)
        return CodePosition(k + 1, offset - (self._line_ends[k - 1] if k else 0))

    def get(self, node: Any, default: Any = None) -> Any:
        key = id(node)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        if self._nodes.get(key) is not node:
            return default
        span = self.span(key)
        if span is None:
            return default
        hit = self._cache[key] = CodeRange(self._position(span[0]), self._position(span[1]))
        return hit

    def __getitem__(self, node: Any) -> CodeRange:
        hit = self.get(node)
        if hit is None:
            raise KeyError(node)
        return hit

    def __contains__(self, node: Any) -> bool:
        return self._nodes.get(id(node)) is node

    def __iter__(self) -> Iterator[cst.CSTNode]:
        return iter(self._nodes.values())

    def __len__(self) -> int:
        return len(self._nodes)


class _PositionsFromProvider(Mapping):
    """The fallback: libcst's own PositionProvider, resolved on first lookup."""

    def __init__(self, module: cst.Module):
        self._module = module
        self._map: Any = None

    def _resolved(self) -> Any:
        if self._map is None:
            from libcst.metadata import MetadataWrapper, PositionProvider
            self._map = MetadataWrapper(self._module, unsafe_skip_copy=True).resolve(PositionProvider)
        return self._map

    def get(self, node: Any, default: Any = None) -> Any:
        return self._resolved().get(node, default)

    def __getitem__(self, node: Any) -> CodeRange:
        return self._resolved()[node]

    def __iter__(self) -> Iterator[cst.CSTNode]:
        return iter(self._resolved())

    def __len__(self) -> int:
        return len(self._resolved())


class ModuleIndex:
    """Nodes of one module by kind, with a parent map (by identity), positions and the module's code."""

    _cache: "OrderedDict[int, ModuleIndex]" = OrderedDict()  # id(module) -> index (which holds the module)
    _CACHE_SIZE = 8

    def __init__(self, module: cst.Module, *, use_codegen: bool = True):
        self.module = module
        self.nodes: List[cst.CSTNode] = []  # every node, in source (pre-)order
        self.parents: Dict[int, cst.CSTNode] = {}
        self._read_names: Optional[Set[str]] = None
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
        self.attributes: List[cst.Attribute] = []
        self.tables: Dict[str, object] = {}  # ImportTable per module name (see names.ImportTable.of)
        self.code: str
        self.positions: Mapping
        if use_codegen and _IndexingState is not None:
            state = _IndexingState(self)
            libcst_private.generate(module, state)
            tokens = state.tokens
            self.code = "".join(tokens)
            if state.popped is not None:
                tokens = tokens + [state.popped]
            self.positions = Positions(state.spans, state.nodes, tokens)
        else:
            _IndexingVisitor(self).walk(module)
            self.code = module.code
            self.positions = _PositionsFromProvider(module)

    @classmethod
    def of(cls, module: cst.Module, base: Optional[cst.Module] = None) -> "ModuleIndex":
        """The index of `module`, built on first use. `base` (the tree `module` was derived from) is
        accepted for the callers that still pass it and not used."""
        idx = cls.cached(module)
        if idx is None:
            idx = cls(module)
        cls.remember(idx)
        return idx

    @classmethod
    def cached(cls, module: cst.Module) -> Optional["ModuleIndex"]:
        """The index of `module` if one is in the cache (nothing is built)."""
        idx = cls._cache.get(id(module))
        return idx if idx is not None and idx.module is module else None

    @classmethod
    def remember(cls, index: "ModuleIndex") -> None:
        """Put an index built earlier (and kept elsewhere) back in the cache."""
        cls._cache[id(index.module)] = index
        cls._cache.move_to_end(id(index.module))
        while len(cls._cache) > cls._CACHE_SIZE:
            cls._cache.popitem(last=False)[1].tables.clear()

    @classmethod
    def forget_all(cls) -> None:
        """Empty the cache once a file is done, so its trees are freed now.

        The tables hold objects that point back at their index (a reference cycle); clearing them
        lets reference counting free the tree at once instead of waiting for the cyclic collector,
        which a run calls rarely (`engine._quiet_gc`)."""
        while cls._cache:
            cls._cache.popitem()[1].tables.clear()

    def _enter(self, node: cst.CSTNode, parent: Optional[cst.CSTNode]) -> None:
        if type(node) is _SKIPPED:
            return
        self.nodes.append(node)
        if parent is not None:
            self.parents[id(node)] = parent
        t = type(node)
        kind = _KINDS.get(t)
        if kind is not None:
            getattr(self, kind).append(node)
            if t is cst.Name:
                self.name_values.add(node.value)  # type: ignore[attr-defined]
            elif t is cst.Attribute:
                self.attr_values.add(node.attr.value)  # type: ignore[attr-defined]

    # -- queries -------------------------------------------------------------------------------
    @property
    def read_names(self) -> Set[str]:
        """`names.names_read(module)`: every Name outside imports, attribute attrs, keyword names
        and parameter names (their defaults and annotations count)."""
        if self._read_names is None:
            out: Set[str] = set()

            def visit(node: cst.CSTNode) -> Sequence[Optional[cst.CSTNode]]:
                t = type(node)
                if t is cst.Name:
                    out.add(node.value)  # type: ignore[attr-defined]
                elif t is cst.Attribute:
                    return (node.attr,)  # type: ignore[attr-defined]
                elif t is cst.Arg:
                    return (node.keyword,)  # type: ignore[attr-defined]
                elif t is cst.Param:
                    return (node.name,)  # type: ignore[attr-defined]
                elif t is cst.Import or t is cst.ImportFrom:
                    return (node,)
                return ()

            self.walk_pruned(visit)
            self._read_names = out
        return self._read_names

    def reads(self, value: str) -> bool:
        """`value in self.read_names`, from the Name nodes of that value alone (no walk of the module)."""
        if self._read_names is not None:
            return value in self._read_names
        parents = self.parents
        for n in self.names:
            if n.value != value:
                continue
            parent = parents.get(id(n))
            t = type(parent)
            if (t is cst.Attribute and parent.attr is n) or (t is cst.Arg and parent.keyword is n) \
                    or (t is cst.Param and parent.name is n):  # type: ignore[union-attr]
                continue
            while parent is not None and type(parent) is not cst.Import and type(parent) is not cst.ImportFrom:
                parent = parents.get(id(parent))
            if parent is None:
                return True
        return False

    def walk_pruned(self, visit: Callable[[cst.CSTNode], Sequence[Optional[cst.CSTNode]]]) -> None:
        """Call `visit` on every node in source order, except inside the subtrees it prunes:
        `visit(node)` returns the nodes (the node itself, or some of its children; None is ignored)
        whose subtrees are left out."""
        pruned: Set[int] = set()
        parents = self.parents
        for node in self.nodes:
            key = id(node)
            if key in pruned:
                continue
            parent = parents.get(key)
            if parent is not None and id(parent) in pruned:
                pruned.add(key)
                continue
            for n in visit(node):
                if n is not None:
                    pruned.add(id(n))

    def parent(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        return self.parents.get(id(node))

    def ancestors(self, node: cst.CSTNode):
        cur = self.parent(node)
        while cur is not None:
            yield cur
            cur = self.parent(cur)

    def paths_to(self, nodes: Iterable[cst.CSTNode]) -> Set[int]:
        """The ids of `nodes` and of every ancestor of theirs."""
        out: Set[int] = set()
        for node in nodes:
            out.add(id(node))
            for a in self.ancestors(node):
                if id(a) in out:
                    break
                out.add(id(a))
        return out

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

    def names_within(self, values: Set[str], scope: cst.CSTNode, outside: Sequence[cst.CSTNode] = ()
                     ) -> Iterator[cst.Name]:
        """The Name nodes of these `values` inside `scope` and inside none of the `outside` nodes."""
        for n in self.names:
            if n.value in values and self.contains(scope, n) and not any(self.contains(o, n) for o in outside):
                yield n

    def calls_in(self, node: cst.CSTNode) -> List[cst.Call]:
        return [c for c in self.calls if self.contains(node, c)]


class _IndexingVisitor(Visitor):
    """The fallback walk: a plain libcst visitor feeding the same index."""

    def __init__(self, index: ModuleIndex):
        super().__init__()
        self._index = index
        self._stack: List[cst.CSTNode] = []

    def walk(self, module: cst.Module) -> None:
        module.visit(self)

    def on_visit(self, node: cst.CSTNode) -> bool:
        self._index._enter(node, self._stack[-1] if self._stack else None)
        self._stack.append(node)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self._stack.pop()


class _Syntactic:
    """`record_syntactic_position` as a plain context manager (cheaper than a generator one)."""

    __slots__ = ("state", "node", "start_node", "end_node", "start")

    def __init__(self, state: "_IndexingState", node: cst.CSTNode, start_node: Optional[cst.CSTNode],
                 end_node: Optional[cst.CSTNode]):
        self.state, self.node, self.start_node, self.end_node = state, node, start_node, end_node
        self.start = len(state.tokens)

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> bool:
        st = self.state
        start = st.span_of(id(self.start_node))[0] if self.start_node is not None else self.start
        end = st.span_of(id(self.end_node))[1] if self.end_node is not None else len(st.tokens)
        st.set_span(self.node, start, end)
        return False


if _CodegenState is not None:
    class _IndexingState(_CodegenState):  # type: ignore[misc,valid-type]
        """Code generation that also records, per node, its parent, its kind and its token span.

        Spans follow libcst's PositionProvider: a node's syntactic span when its codegen records
        one, else the span of everything it generated.
        """

        def __init__(self, index: ModuleIndex):
            super().__init__(default_indent=index.module.default_indent,
                             default_newline=index.module.default_newline)
            self.index = index
            self.spans: Dict[int, Tuple[int, int]] = {}
            self.nodes: Dict[int, cst.CSTNode] = {}
            self.stack: List[cst.CSTNode] = [None]  # type: ignore[list-item]  # parents; None above the module
            self.starts: List[int] = []
            self.popped: Optional[str] = None
            self.kind_lists = {t: getattr(index, kind) for t, kind in _KINDS.items()}
            self.span_of = self.spans.__getitem__

        def before_codegen(self, node: cst.CSTNode) -> None:
            # ModuleIndex._enter, inlined: this runs once per node of every tree indexed
            if type(node) is _SKIPPED:
                return
            stack = self.stack
            parent = stack[-1]
            index = self.index
            t = type(node)
            self.starts.append(len(self.tokens))
            index.nodes.append(node)
            if parent is not None:
                index.parents[id(node)] = parent
            kind = self.kind_lists.get(t)
            if kind is not None:
                kind.append(node)
                if t is cst.Name:
                    index.name_values.add(node.value)  # type: ignore[attr-defined]
                elif t is cst.Attribute:
                    index.attr_values.add(node.attr.value)  # type: ignore[attr-defined]
            stack.append(node)

        def after_codegen(self, node: cst.CSTNode) -> None:
            if type(node) is _SKIPPED:
                return
            self.stack.pop()
            start = self.starts.pop()
            key = id(node)
            spans = self.spans
            if key not in spans:
                # the module's own span ends after the newline it popped, as PositionProvider's does
                spans[key] = (start, len(self.tokens) if self.popped is None else len(self.tokens) + 1)
                self.nodes[key] = node

        def record_syntactic_position(self, node: cst.CSTNode, *, start_node: Optional[cst.CSTNode] = None,
                                      end_node: Optional[cst.CSTNode] = None) -> Any:
            return _Syntactic(self, node, start_node, end_node)

        def set_span(self, node: cst.CSTNode, start: int, end: int) -> None:
            """Record `node`'s syntactic span (token indices), as PositionProvider's state would."""
            key = id(node)
            self.spans[key] = (start, end)
            self.nodes[key] = node

        def pop_trailing_newline(self) -> None:
            if self.tokens:
                self.popped = self.tokens.pop()

else:  # pragma: no cover
    _IndexingState = None  # type: ignore[assignment,misc]


# Left out of the index (its nodes, parents, kinds and positions): a leaf nothing asks about, and
# two in five of a module's nodes
_SKIPPED = cst.SimpleWhitespace


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


def positions_of(module: cst.Module) -> Mapping:
    """A drop-in for `wrapper.resolve(PositionProvider)` backed by the shared index."""
    return ModuleIndex.of(module).positions
