"""Deciding, from bytes alone, which codemods a file needs, before anything is parsed.

Stage 1 (`coarse`) answers exactly what `codemods.registry.may_need_work` answers, only faster: the
registry's regex has no literal prefix, so `re` tries every alternative at every byte (~13 MB/s).
We derive from it one required literal per alternative (`cuda.amp`, `spawn`, `-1e`...), test those
with `bytes.__contains__` (memchr speed) and run the regex itself only on files that contain one.

Stage 2 (`codemods_for`) picks the codemods that run on a file: a codemod runs when one of its own
PREFILTER tokens occurs in the file, unless every token that occurs is a known-noisy one whose
refinement below proves the codemod cannot act. Refinements rest on the codemods' contract: names
are resolved through imports (codemods/names.py ImportTable), so a file without an import of apex
cannot hold a name that resolves under `apex.`; only the word in comments, strings or `has_apex`
flags. A token with no refinement always runs the codemod, so a new codemod token is never skipped.
"""
from __future__ import annotations

import ast
import functools
import re
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Set, Tuple

try:  # Python >= 3.11
    import re._parser as _sre_parse  # type: ignore[import-not-found]
    from re import _constants as _sre_const  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python < 3.11
    import sre_constants as _sre_const  # type: ignore[no-redef]
    import sre_parse as _sre_parse  # type: ignore[no-redef]

from codemods import screens
from codemods.apex_bytes import may_import_apex
from codemods.ast_walk import ast_nodes, parse_ast
from codemods.records import RepoFacts

if TYPE_CHECKING:
    from codemods.base import Codemod

# -- stage 1: the registry regex, fast -----------------------------------------------------------


def _branch_literal(items) -> Optional[bytes]:
    """The longest run of plain literal bytes one regex branch must contain, or None.

    A branch that is one case-insensitive group `(?i:...)` gives its literal lower-cased and
    prefixed with NUL (a byte no source contains), meaning "search the lower-cased data".
    """
    if len(items) == 1 and items[0][0] is _sre_const.SUBPATTERN:
        _group, add_flags, del_flags, sub = items[0][1]
        inner = _branch_literal(list(sub))
        if inner is None or inner.startswith(b"\0"):
            return None
        return (b"\0" + inner.lower()) if add_flags & re.IGNORECASE else inner
    best: List[int] = []
    run: List[int] = []
    for op, av in items:
        if op is _sre_const.LITERAL:
            run.append(av)
            continue
        if op is _sre_const.IN and len(av) == 1 and av[0][0] is _sre_const.LITERAL:
            run.append(av[0][1])  # a one-character class such as [-]
            continue
        if op is _sre_const.AT:  # \b, ^, $ take no bytes: the run goes on
            continue
        if len(run) > len(best):
            best = run
        run = []
    if len(run) > len(best):
        best = run
    return bytes(best) if len(best) >= 2 else None


def required_literals(pattern: "re.Pattern[bytes]") -> Optional[Tuple[bytes, ...]]:
    """Literals of which one occurs in every match of `pattern`; None when that cannot be derived.

    Only flag-free byte patterns that are a top-level alternation of simple branches qualify; the
    search for a literal is then a safe first test before the regex itself.
    """
    if not isinstance(pattern.pattern, bytes) or pattern.flags & (re.IGNORECASE | re.VERBOSE):
        return None
    try:
        parsed = _sre_parse.parse(pattern.pattern, pattern.flags)
    except Exception:  # pragma: no cover - private API changed
        return None
    items = list(parsed)
    branches = [items]
    if len(items) == 1 and items[0][0] is _sre_const.BRANCH:
        branches = [list(b) for b in items[0][1][1]]
    out: List[bytes] = []
    for b in branches:
        lit = _branch_literal(b)
        if lit is None:
            return None
        out.append(lit)
    return tuple(dict.fromkeys(out))


def split_alternatives(source: bytes) -> List[bytes]:
    """The top-level `|` alternatives of a regex source (brackets, groups and escapes respected)."""
    out, depth, start, i, in_class = [], 0, 0, 0, False
    while i < len(source):
        c = source[i:i + 1]
        if c == b"\\":
            i += 2
            continue
        if in_class:
            if c == b"]":
                in_class = False
        elif c == b"[":
            in_class = True
            if source[i + 1:i + 2] == b"]":
                i += 1
        elif c == b"(":
            depth += 1
        elif c == b")":
            depth -= 1
        elif c == b"|" and depth == 0:
            out.append(source[start:i])
            start = i + 1
        i += 1
    out.append(source[start:])
    return out


class FastSearch:
    """`pattern.search(data) is not None`, answered branch by branch behind literal pre-tests.

    Each top-level alternative gets its own regex (which `re` scans quickly when it starts with a
    literal) guarded by a literal the alternative must contain. Patterns this cannot split safely
    are searched as they are.
    """

    def __init__(self, pattern: "re.Pattern[bytes]"):
        self.pattern = pattern
        self.branches: Optional[List[Tuple[bytes, "re.Pattern[bytes]"]]] = None
        lits = required_literals(pattern)
        if lits is None:
            return
        try:
            parts = split_alternatives(pattern.pattern)
            branches = [(required_literals(re.compile(p, pattern.flags)), re.compile(p, pattern.flags))
                        for p in parts]
        except re.error:
            return
        # a branch without a derivable literal (e.g. `(?i:...)`) is searched on its own, unguarded
        self.branches = [(bl[0] if bl is not None and len(bl) == 1 else b"", rx) for bl, rx in branches]

    def __call__(self, data: bytes, present: Optional["Present"] = None) -> bool:
        if self.branches is None:
            return self.pattern.search(data) is not None
        seen = present.seen if present is not None else {}
        lowered: Optional[bytes] = None
        for lit, rx in self.branches:
            if lit[:1] == b"\0":
                if lowered is None:
                    lowered = data.lower()
                if lit[1:] not in lowered:
                    continue
            else:
                hit = seen.get(lit)
                if hit is None:
                    hit = seen[lit] = lit in data
                if not hit:
                    continue
            if rx.search(data) is not None:
                return True
        return False


class Present:
    """Which byte strings occur in one file's bytes, each searched for once: both stages and every
    codemod's tokens ask about the same few strings (`apex` alone is a token of five codemods)."""

    __slots__ = ("data", "seen")

    def __init__(self, data: bytes):
        self.data = data
        self.seen: Dict[bytes, bool] = {}

    def __call__(self, token: bytes) -> bool:
        hit = self.seen.get(token)
        if hit is None:
            hit = self.seen[token] = token in self.data
        return hit


_COARSE: Dict[int, FastSearch] = {}


def coarse(data: bytes, present: Optional[Present] = None) -> bool:
    """Exactly `codemods.registry.may_need_work(data)`, at memchr speed for files that do not match."""
    rx = screens.PREFILTER
    fs = _COARSE.get(id(rx))
    if fs is None or fs.pattern is not rx:
        fs = _COARSE[id(rx)] = FastSearch(rx)
    return fs(data, present)


# -- stage 2: which codemods a file needs ---------------------------------------------------------


def _imports_apex(data: bytes, module_name: str, facts: Optional[RepoFacts]) -> bool:
    return may_import_apex(data, module_name)


_IMPORT_ERROR_HANDLER = re.compile(rb"except[ \t(]+(?:builtins\.)?(?:ImportError|ModuleNotFoundError)\b")


_GUARD_TYPES = ("ImportError", "ModuleNotFoundError")


@functools.lru_cache(maxsize=64)
def _install_guard(data: bytes) -> bool:
    """The shape the imports codemod unwraps, on the stdlib AST: `try:` holding only imports, one
    ImportError (or ModuleNotFoundError) handler holding only `raise` / expression statements,
    whose source mentions apex; no `else`, no `finally`."""
    first = _IMPORT_ERROR_HANDLER.search(data)
    if first is None:
        return False
    # the handler's window starts a line above its `except`: an apex only above the first handler's
    # window (a URL in the module docstring) cannot be in any handler's
    above = data.rfind(b"\n", 0, max(data.rfind(b"\n", 0, first.start()), 0)) + 1
    if data.lower().rfind(b"apex") < above:
        return False
    try:
        tree = parse_ast(data)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return True  # libcst reports the file
    lines: Optional[List[bytes]] = None
    for node in ast_nodes(tree):
        if not isinstance(node, ast.Try) or node.orelse or node.finalbody or len(node.handlers) != 1 \
                or not all(isinstance(s, (ast.Import, ast.ImportFrom)) for s in node.body):
            continue
        h = node.handlers[0]
        kind = h.type.id if isinstance(h.type, ast.Name) else getattr(h.type, "attr", None)
        if kind not in _GUARD_TYPES or not all(isinstance(s, (ast.Raise, ast.Expr)) for s in h.body):
            continue
        if lines is None:
            lines = data.splitlines()
        end = h.end_lineno or h.lineno
        if b"apex" in b"\n".join(lines[max(h.lineno - 2, 0):end + 1]).lower():  # a line either side to spare
            return True
    return False


# token -> predicate (data, module_name, facts) that must hold for the token to count.
Refinement = Callable[[bytes, str, Optional[RepoFacts]], bool]


def _regex(pattern: bytes) -> Refinement:
    rx = re.compile(pattern)
    return lambda data, module_name, facts: rx.search(data) is not None


def _contains(literal: bytes) -> Refinement:
    return lambda data, module_name, facts: literal in data


def _any_of(*checks: Refinement) -> Refinement:
    return lambda data, module_name, facts: any(c(data, module_name, facts) for c in checks)


# Each entry mirrors an early exit of the codemod it names (keep them in step; tests/test_engine_prefilter.py
# runs every fixture with and without the prefilter and fails when they drift):
# - amp, apex_modules, apex_parallel: every site is a name resolved under `apex` through an import.
#   (amp's cross-module call sites are let through by `mentions_fact`.)
# - imports: apex imports, or an `except ImportError` install guard whose message names apex.
# - hazards: its own MIXED_PRECISION regex spells apex as a whole word.
# - launch: spawn/start_processes are resolved under torch.multiprocessing; `--local_rank` is an
#   argparse flag written as a string literal.
REFINEMENTS: Dict[str, Dict[bytes, Refinement]] = {
    "amp": {b"apex": _imports_apex, b"scaler": _imports_apex, b"amp": _imports_apex},
    "apex_modules": {b"apex": _imports_apex},
    "apex_parallel": {b"apex": _imports_apex},
    "imports": {b"apex": _any_of(_imports_apex, lambda data, module_name, facts: _install_guard(data))},
    "hazards": {b"apex": _regex(rb"\bapex\b")},
    "lint_autocast_modes": {b"apex": _imports_apex},  # apex code the run migrates gains autocast / GradScaler
    "launch": {b"spawn": _contains(b"multiprocessing"), b"start_processes": _contains(b"multiprocessing"),
               b"local_rank": _regex(rb"--local[_-]rank[\"']"), b"local-rank": _regex(rb"--local[_-]rank[\"']")},
}


def _published_names(facts: RepoFacts) -> Set[str]:
    """The names other files' call sites spell: the functions that now take a scaler, spawn entries."""
    names: Set[str] = set()
    for funcs in facts.scaler_functions.values():
        names.update(funcs)
    for key in facts.spawn_entries:
        names.add(str(key).rsplit(".", 1)[-1])
    for required in facts.scaler_required.values():
        names.update(n.partition(".")[0] for n in required)
    return names


def fact_names(facts: Optional[RepoFacts]) -> Set[bytes]:
    """Names pass 1 published for other files (functions that now take a scaler, spawn entries)."""
    if not facts:
        return set()
    return {n.encode("utf-8") for n in _published_names(facts) if n}


def codemod_wanted(cm: "Codemod | screens.Screen", data: bytes, module_name: str = "",
                   facts: Optional[RepoFacts] = None, present: Optional[Present] = None) -> bool:
    """Whether `cm` may rewrite or report anything in a file with these bytes."""
    has = present or Present(data)
    if not any(has(token) for token in cm.PREFILTER):
        return publishes_facts(cm) and mentions_fact(data, facts, module_name)
    wants = getattr(cm, "wants", None)
    if callable(wants):  # a codemod may state its own exact second stage
        return bool(wants(data, module_name)) or (publishes_facts(cm) and mentions_fact(data, facts, module_name))
    refine = REFINEMENTS.get(cm.NAME)
    if not refine:
        return True
    for token in cm.PREFILTER:
        if has(token):
            check = refine.get(token)
            if check is None or check(data, module_name, facts):
                return True
    return publishes_facts(cm) and mentions_fact(data, facts, module_name)


def mentions_fact(data: bytes, facts: Optional[RepoFacts], module_name: str = "",
                  skip_keys: Sequence[str] = ()) -> bool:
    """Whether a file with these bytes (module `module_name`) may call a function `facts` publish.

    Such a call names the function, and the file names the module that defines it: `import` and
    `from ... import` spell its last component, except `from . import fn` inside that very package
    (a module under it counts as reached). Facts under `skip_keys` (the file's own) are left out.
    """
    if not facts:
        return False
    for key, funcs in facts.scaler_functions.items():
        if key in skip_keys or not funcs:
            continue
        module = key.rpartition("::")[2]
        named = not module or module.rpartition(".")[2].encode() in data or \
            module_name.startswith(module + ".")
        if named and any(f.encode() in data for f in funcs):
            return True
    for key, required in facts.scaler_required.items():
        if key in skip_keys or not required:
            continue
        module = key.rpartition("::")[2]
        named = not module or module.rpartition(".")[2].encode() in data or module_name.startswith(module + ".")
        if named and any(n.partition(".")[0].encode() in data for n in required):
            return True  # a call of a function or method with a required scaler parameter (A2A701)
    if module_name in facts.attr_candidates and any(k.startswith(module_name + ".") for k in facts.scaler_bases):
        return True  # a mixin whose subclass in the run keeps the scaler on `self` (codemods/amp_threading.py)
    if b"initialize" in data and any(m != module_name and m.rpartition(".")[2].encode() in data
                                     for m in facts.unmigrated_amp):
        return True  # an `amp.initialize` that another module's unmigrated amp code relies on
    if b"apex" in data and (b"raise" in data or b"assert" in data) and \
            any(m != module_name for m in facts.unmigrated_amp):
        return True  # an apex install check that stays while another module keeps apex (A2A175)
    return any(str(key).rsplit(".", 1)[-1].encode() in data for key in facts.spawn_entries)


def candidate(data: bytes, codemods: Sequence[Codemod], select: Callable[[str], bool]) -> Optional[Present]:
    """Stage 1 before pass 1 (no facts yet): None when no selected codemod can want the file, else
    the token searches made so far, for `codemods_for` to reuse.

    A file holding none of the selected codemods' tokens is answered first, with one search per
    distinct token and no regex: no codemod can want it, whatever the registry regex says."""
    for token in _tokens(selected(codemods, select)):
        if token in data:
            break
    else:
        return None
    present = Present(data)
    return present if coarse(data, present) else None


def holds_a_screen_token(data: bytes) -> bool:
    """Whether some codemod's PREFILTER token occurs in `data` (one search per distinct token): a file
    without any is skipped under every selection, with no module name worked out."""
    return any(token in data for token in _tokens(screens.SCREENS))


def wanted_by_some(data: bytes, module_name: str = "") -> bool:
    """Both stages before pass 1 under every selection: whether some codemod may want a Python file
    with these bytes (module `module_name`). Reads only `codemods.screens`, not the codemods, so it
    runs without libcst (the scout's screen). A selection only drops codemods, so a file no screen
    wants here is skipped by `candidate` and `codemods_for` under any selection too."""
    if not holds_a_screen_token(data):
        return False
    present = Present(data)
    if not coarse(data, present):
        return False
    return any(codemod_wanted(s, data, module_name, None, present) for s in screens.BY_COST)


@functools.lru_cache(maxsize=8)
def _tokens_of(codemods: Tuple["Codemod | screens.Screen", ...]) -> Tuple[bytes, ...]:
    return tuple(dict.fromkeys(token for cm in codemods for token in cm.PREFILTER))


def _tokens(codemods: Sequence["Codemod | screens.Screen"]) -> Tuple[bytes, ...]:
    """The distinct PREFILTER tokens of `codemods`, in order."""
    return _tokens_of(tuple(codemods))


def codemods_for(data: bytes, codemods: Sequence[Codemod], select: Callable[[str], bool], *,
                 module_name: str = "", facts: Optional[RepoFacts] = None,
                 enabled: bool = True, present: Optional[Present] = None) -> List[Codemod]:
    """The selected codemods that must run on a file (all selected ones when `enabled` is False)."""
    chosen = selected(codemods, select)
    if not enabled:
        return list(chosen)
    has = present or Present(data)
    return [cm for cm in chosen if codemod_wanted(cm, data, module_name, facts, has)]


_SELECTED: Dict[Tuple[int, int], Tuple[Sequence[Codemod], Callable[[str], bool], List[Codemod]]] = {}


def selected(codemods: Sequence[Codemod], select: Callable[[str], bool]) -> List[Codemod]:
    """The codemods with a rule code `select` keeps, worked out once per selection (a run asks for
    every file with the same one)."""
    key = (id(codemods), id(select))
    hit = _SELECTED.get(key)
    if hit is not None and hit[0] is codemods and hit[1] is select:
        return hit[2]
    if len(_SELECTED) > 64:  # per-file selections (per-file-ignores) must not pile up
        _SELECTED.clear()
    out = [cm for cm in codemods if any(select(c) for c in cm.CODES)]
    _SELECTED[key] = (codemods, select, out)
    return out


def needs_work(data: bytes, codemods: Sequence[Codemod], select: Callable[[str], bool], *,
               module_name: str = "", facts: Optional[RepoFacts] = None) -> bool:
    """Both stages: True when some selected codemod must see this file."""
    if not coarse(data) and not mentions_fact(data, facts, module_name):
        return False
    return bool(codemods_for(data, codemods, select, module_name=module_name, facts=facts))


def publishes_facts(cm: Codemod) -> bool:
    """Whether `cm` contributes repo facts, so that the files it wants go to pass 1."""
    return bool(getattr(cm, "PUBLISHES_FACTS", False))


def fact_needles(facts: Optional[RepoFacts]) -> Tuple[bytes, ...]:
    """Byte strings of which every file `mentions_fact` says yes to holds one (the published names,
    and `initialize` when a module left amp unmigrated), so that a file without any needs no module
    name worked out."""
    if not facts:
        return ()
    needles = {n.encode("utf-8") for n in _published_names(facts)}  # an empty name: in every file
    if facts.unmigrated_amp:
        needles.add(b"initialize")
        needles.add(b"apex")  # an install check that stays (A2A175)
    return tuple(sorted(needles))


def has_fact_names(facts: Optional[RepoFacts]) -> bool:
    """Whether pass 1 published names that make other files' call sites need pass 2."""
    return bool(fact_names(facts)) or bool(facts and facts.unmigrated_amp)
