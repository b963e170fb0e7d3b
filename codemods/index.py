"""One traversal of a module that every codemod can share: parents, calls, names, positions, code.

libcst visits are the expensive part of a codemod: a visitor rebuilds every node it passes, so a
full walk of a 4,000-line file costs about as much as parsing it, and libcst's PositionProvider
costs twice that. The index is gathered instead during one code generation of the module (a
custom `CodegenState` whose per-node hooks record the parent stack, the nodes by kind and the
token span of every node), which gives the module's text, the parent map and the positions in
one pass at a fraction of that cost. `ModuleIndex.of(module)` builds it once per tree object and
every codemod that sees the same tree reuses it.

The codegen hooks are libcst internals; when they are missing (another libcst), the index falls
back to a visitor walk and PositionProvider, with the same results.
"""
from __future__ import annotations

import bisect
import re
from collections import OrderedDict
from collections.abc import Mapping
from itertools import accumulate, repeat
from operator import add, attrgetter, sub
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple

import libcst as cst
from libcst.metadata import CodePosition, CodeRange

from . import fast_codegen
from .walk import Visitor

fast_codegen.install()  # every index is a code generation: its parentheses without a generator each

try:
    from libcst._nodes.internal import CodegenState as _CodegenState
except ImportError:  # pragma: no cover - a libcst without the private codegen state
    _CodegenState = None  # type: ignore[assignment,misc]

_NEWLINE = re.compile(r"\r\n?|\n")

# Node kinds the index lists; Name and Attribute also feed the value sets.
_KINDS = {
    cst.Call: "calls", cst.Name: "names", cst.FunctionDef: "functions", cst.ClassDef: "classes",
    cst.With: "withs", cst.Decorator: "decorators", cst.If: "ifs", cst.Try: "tries",
    cst.SimpleString: "strings", cst.Import: "imports", cst.ImportFrom: "imports", cst.Attribute: "attributes",
}
_KIND_LISTS = tuple(dict.fromkeys(_KINDS.values()))
_NAMES, _ATTRIBUTES = _KIND_LISTS.index("names"), _KIND_LISTS.index("attributes")
_VALUE = attrgetter("value")
_ATTR_VALUE = attrgetter("attr.value")


class Positions(Mapping):
    """node -> CodeRange, the same ranges libcst's PositionProvider gives, computed on lookup.

    Spans are kept as token indices; a lookup turns them into lines and columns with a prefix sum
    of the token lengths and a bisect over the newline offsets of the text. Spans of statements
    copied from an earlier tree's index are read from that index, shifted (`borrowed`).
    """

    def __init__(self, spans: Dict[int, Tuple[int, int]], nodes: Dict[int, cst.CSTNode], tokens: List[str],
                 borrowed: Optional[Dict[int, Tuple["Positions", int]]] = None):
        self._spans = spans
        self._nodes = nodes
        self._tokens = tokens
        self._borrowed = borrowed if borrowed is not None else {}
        self._offsets: Optional[List[int]] = None
        self._line_ends: List[int] = []
        self._cache: Dict[int, CodeRange] = {}

    def span(self, key: int) -> Optional[Tuple[int, int]]:
        """The token span of the node with this id, if it is in the tree."""
        span = self._spans.get(key)
        if span is None:
            lent = self._borrowed.get(key)
            if lent is not None:
                inner = lent[0].span(key)
                if inner is not None:
                    return inner[0] + lent[1], inner[1] + lent[1]
        return span

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

    def __init__(self, module: cst.Module, *, use_codegen: bool = True, base: Optional["ModuleIndex"] = None):
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
        self._kind_lists = tuple(getattr(self, kind) for kind in _KIND_LISTS)
        self.tables: Dict[str, object] = {}  # ImportTable per module name (see names.ImportTable.of)
        self.code: str
        self.positions: Mapping
        # statements of a body (Module's or IndentedBlock's), for a later tree's index to copy
        # (`base`): id -> _Statement, and their ids and first node positions in source order
        self.statements: Dict[int, _Statement] = {}
        self.statement_keys: List[int] = []
        self.statement_starts: List[int] = []
        if use_codegen and _IndexingState is not None:
            skeleton = _skeleton(module, base) if base is not None else None
            if skeleton is not None:
                state: _IndexingState = _SplicingState(self, base, skeleton[1])  # type: ignore[arg-type]
                skeleton[0]._codegen(state)
            else:
                state = _IndexingState(self)
                module._codegen(state)
            tokens = state.tokens
            self.code = "".join(tokens)
            if state.popped is not None:
                tokens = tokens + [state.popped]
            self.positions = Positions(state.spans, state.nodes, tokens, state.borrowed)
        else:
            _IndexingVisitor(self).walk(module)
            self.code = module.code
            self.positions = _PositionsFromProvider(module)

    @classmethod
    def of(cls, module: cst.Module, base: Optional[cst.Module] = None) -> "ModuleIndex":
        """The index of `module`, built on first use. `base`: a tree `module` was derived from (a
        codemod's input); the statements the two share are copied from its index, when it has one,
        instead of generated again."""
        idx = cls.cached(module)
        if idx is None:
            idx = cls(module, base=cls.cached(base) if base is not None else None)
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

    def kind_lengths(self) -> Tuple[int, ...]:
        """The lengths of the per-kind lists, in `_KIND_LISTS` order."""
        return tuple(map(len, self._kind_lists))

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
            self.borrowed: Dict[int, Tuple[Positions, int]] = {}
            self.span_of = self.spans.__getitem__

        def before_codegen(self, node: cst.CSTNode) -> None:
            # ModuleIndex._enter, inlined: this runs once per node of every tree indexed
            if type(node) is _SKIPPED:
                return
            stack = self.stack
            parent = stack[-1]
            index = self.index
            nodes = index.nodes
            t = type(node)
            tp = type(parent)
            if (tp is cst.IndentedBlock or tp is cst.Module) and t not in _NOT_STATEMENTS:
                # a body statement: its start goes on the stack with what a later index needs to copy it
                index.statement_keys.append(id(node))
                index.statement_starts.append(len(nodes))
                self.starts.append((len(self.tokens), len(nodes), tuple(self.indent_tokens),  # type: ignore[arg-type]
                                    index.kind_lengths()))
            else:
                self.starts.append(len(self.tokens))
            nodes.append(node)
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
            opened = None
            if type(start) is tuple:
                opened, start = start, start[0]
            if key not in spans:
                # the module's own span ends after the newline it popped, as PositionProvider's does
                spans[key] = (start, len(self.tokens) if self.popped is None else len(self.tokens) + 1)
                self.nodes[key] = node
            if opened is not None:
                index = self.index
                index.statements[key] = (node, start, len(self.tokens), opened[1], len(index.nodes), opened[2],
                                         opened[3], index.kind_lengths())

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

    fast_codegen.record_spans_directly(_IndexingState)  # `_Syntactic` records through set_span too
else:  # pragma: no cover
    _IndexingState = None  # type: ignore[assignment,misc]


# (node, first token, end token, first node, end node, indentation, kind list lengths before, after):
# a body statement's whole range in its index's token list, node list and per-kind lists, and the
# indentation it was generated under
_Statement = Tuple[cst.CSTNode, int, int, int, int, Tuple[str, ...], Tuple[int, ...], Tuple[int, ...]]
_NOT_STATEMENTS = frozenset({cst.EmptyLine, cst.TrailingWhitespace})
# Left out of the index (its nodes, parents, kinds and positions): a leaf nothing asks about, and
# two in five of a module's nodes
_SKIPPED = cst.SimpleWhitespace
_BODY_OWNERS = frozenset({cst.Module, cst.IndentedBlock})
# nodes that hold statements below them: a changed one is copied with its bodies' shared statements
# replaced by stand-ins
_HOLDS_STATEMENTS = (cst.BaseCompoundStatement, cst.IndentedBlock, cst.Else, cst.Finally, cst.ExceptHandler,
                     cst.ExceptStarHandler, cst.MatchCase)


_HOLDS: Dict[type, bool] = {}


def _holds_statements(t: type) -> bool:
    """issubclass(t, _HOLDS_STATEMENTS), cached per type (abstract-class checks are slow)."""
    holds = _HOLDS.get(t)
    if holds is None:
        holds = _HOLDS[t] = issubclass(t, _HOLDS_STATEMENTS)
    return holds


class _Splice:
    """Stands in a body for a statement the base index generated: its tokens and index entries are
    copied from there when the indentation matches, else it is generated as usual."""

    __slots__ = ("node",)

    def __init__(self, node: cst.CSTNode):
        self.node = node

    def _codegen(self, state: "_SplicingState", **kwargs: Any) -> None:
        if kwargs or not state.splice(self.node):
            self.node._codegen(state, **kwargs)


def _skeleton(module: cst.Module, base: "ModuleIndex") -> Optional[Tuple[cst.Module, Dict[int, cst.CSTNode]]]:
    """`module` with every body statement `base` generated replaced by a `_Splice`, and the map from
    the copies made on the way back to `module`'s own nodes; None when nothing can be shared."""
    if not base.statements or module.default_indent != base.module.default_indent \
            or module.default_newline != base.module.default_newline:
        return None
    statements = base.statements
    originals: Dict[int, cst.CSTNode] = {}

    def shared(stmt: Any) -> bool:
        known = statements.get(id(stmt))
        return known is not None and known[0] is stmt

    def copy(node: cst.CSTNode) -> cst.CSTNode:
        changes: Dict[str, Any] = {}
        if type(node) in _BODY_OWNERS:
            body = [_Splice(b) if shared(b) else copy(b) if _holds_statements(type(b)) else b
                    for b in node.body]
            if any(a is not b for a, b in zip(body, node.body)):
                changes["body"] = body
        else:
            for name in ("body", "orelse", "handlers", "finalbody", "cases"):
                value = getattr(node, name, None)
                if _holds_statements(type(value)):
                    new = copy(value)
                    if new is not value:
                        changes[name] = new
                elif isinstance(value, (list, tuple)) and value and _holds_statements(type(value[0])):
                    items = [copy(v) for v in value]
                    if any(a is not b for a, b in zip(items, value)):
                        changes[name] = items
        if not changes:
            return node
        out = node.with_changes(**changes)
        originals[id(out)] = node
        return out

    skeleton = copy(module)
    return (skeleton, originals) if skeleton is not module else None  # type: ignore[return-value]


if _IndexingState is not None:
    class _SplicingState(_IndexingState):  # type: ignore[misc,valid-type]
        """Code generation of a skeleton (`_skeleton`) that indexes the real tree: copies stand for
        their originals, and stand-ins copy the base index's tokens, nodes, parents and spans."""

        def __init__(self, index: ModuleIndex, base: ModuleIndex, originals: Dict[int, cst.CSTNode]):
            super().__init__(index)
            self.base = base
            self.originals = originals
            self.base_tokens = base.positions._tokens  # type: ignore[attr-defined]
            # spans generated here, or borrowed from the base: what the finished Positions will answer
            self.span_of = Positions(self.spans, self.nodes, self.tokens, self.borrowed).span  # type: ignore[assignment]

        def before_codegen(self, node: cst.CSTNode) -> None:
            if type(node) is not _SKIPPED:
                super().before_codegen(self.originals.get(id(node), node))

        def after_codegen(self, node: cst.CSTNode) -> None:
            if type(node) is not _SKIPPED:
                super().after_codegen(self.originals.get(id(node), node))

        def record_syntactic_position(self, node: cst.CSTNode, *, start_node: Optional[cst.CSTNode] = None,
                                      end_node: Optional[cst.CSTNode] = None) -> Any:
            return _Syntactic(self, self._real(node), self._real(start_node), self._real(end_node))

        def _real(self, node: Any) -> Any:
            if type(node) is _Splice:
                return node.node
            return self.originals.get(id(node), node)

        def splice(self, stmt: cst.CSTNode) -> bool:
            """Copy `stmt` from the base index if it was generated under this same indentation: its
            tokens, and its subtree's nodes, parents, kind lists and spans (read from the base's)."""
            base = self.base
            _, t0, t1, n0, n1, indent, kinds0, kinds1 = base.statements[id(stmt)]
            if indent != tuple(self.indent_tokens):
                return False
            index = self.index
            shift, nshift = len(self.tokens) - t0, len(index.nodes) - n0
            self.tokens.extend(self.base_tokens[t0:t1])
            here = index.kind_lengths()
            subtree = base.nodes[n0:n1]
            keys = list(map(id, subtree))
            index.nodes.extend(subtree)
            inner = keys[1:]
            index.parents.update(zip(inner, map(base.parents.__getitem__, inner)))
            parent = self.stack[-1]
            if parent is not None:
                index.parents[keys[0]] = parent
            self.nodes.update(zip(keys, subtree))
            self.borrowed.update(zip(keys, repeat((base.positions, shift))))
            for kind, a, b in zip(_KIND_LISTS, kinds0, kinds1):
                if b > a:
                    getattr(index, kind).extend(getattr(base, kind)[a:b])
            if kinds1[_NAMES] > kinds0[_NAMES]:
                index.name_values.update(map(_VALUE, base.names[kinds0[_NAMES]:kinds1[_NAMES]]))
            if kinds1[_ATTRIBUTES] > kinds0[_ATTRIBUTES]:
                index.attr_values.update(map(_ATTR_VALUE, base.attributes[kinds0[_ATTRIBUTES]:kinds1[_ATTRIBUTES]]))
            moved = tuple(map(sub, here, kinds0))
            first = bisect.bisect_left(base.statement_starts, n0)
            last = bisect.bisect_left(base.statement_starts, n1)
            for key in base.statement_keys[first:last]:
                n, a, b, m0, m1, ind, k0, k1 = base.statements[key]
                index.statements[key] = (n, a + shift, b + shift, m0 + nshift, m1 + nshift, ind,
                                         tuple(map(add, k0, moved)), tuple(map(add, k1, moved)))
                index.statement_keys.append(key)
                index.statement_starts.append(m0 + nshift)
            return True


else:  # pragma: no cover
    _SplicingState = None  # type: ignore[assignment,misc]


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
