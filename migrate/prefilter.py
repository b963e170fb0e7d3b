"""Which codemods a file needs, decided from its bytes before anything is parsed.

Each codemod declares TOKENS beside its code (`codemods.base.Codemod`): byte strings of which one
occurs in every file it can change or report on, and WORDS, tokens that count only as a whole word.
A codemod runs on a file that holds one of its tokens or words; a fact-publishing codemod also runs
on a file that may call a function that another file's pass 1 published (`mentions_fact`). Each
distinct token and word is searched for once per file (`Present`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from codemods.records import RepoFacts

if TYPE_CHECKING:
    from codemods.base import Codemod


class Present:
    """Which tokens and words occur in one file's bytes, each searched for once (`apex` alone is a
    token of several codemods)."""

    __slots__ = ("data", "seen", "words")

    def __init__(self, data: bytes):
        self.data = data
        self.seen: Dict[bytes, bool] = {}
        self.words: Dict[bytes, bool] = {}

    def __call__(self, token: bytes) -> bool:
        hit = self.seen.get(token)
        if hit is None:
            hit = self.seen[token] = token in self.data
        return hit

    def word(self, word: bytes) -> bool:
        hit = self.words.get(word)
        if hit is None:
            hit = self.words[word] = _registry().has_word(self.data, word)
        return hit

    def any_of(self, cm: "Codemod") -> bool:
        """Whether one of `cm`'s TOKENS or WORDS occurs."""
        return any(self(token) for token in cm.TOKENS) or any(self.word(w) for w in cm.WORDS)


def _registry() -> Any:
    from codemods import registry  # imported on first use: a re-run answered from the cache needs no codemod
    return registry


def coarse(data: bytes, present: Optional[Present] = None) -> bool:
    """Whether some codemod's token or word occurs in `data` (`codemods.registry.may_need_work`)."""
    has = present or Present(data)
    registry = _registry()
    return any(has(token) for token in registry.TOKENS) or any(has.word(w) for w in registry.WORDS)


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


def codemod_wanted(cm: "Codemod", data: bytes, module_name: str = "",
                   facts: Optional[RepoFacts] = None, present: Optional[Present] = None) -> bool:
    """Whether `cm` may rewrite or report anything in a file with these bytes: one of its TOKENS
    occurs, or it publishes facts and the file may call a function they name."""
    if (present or Present(data)).any_of(cm):
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
    # a function that joins the process group (codemods/launch_facts.py): only a file that spawns reads it
    if b"spawn" in data and any(str(key).rsplit(".", 1)[-1].encode() in data for key in facts.spawn_entries):
        return True
    from codemods.amp_object_attr import mentions
    from codemods.init_helpers import needles as helper_needles
    if any(n in data for n in helper_needles(facts.extra)):
        return True  # a call of another module's setup helper (codemods/init_helpers.py)
    return mentions(data, facts.extra)  # apex amp stored on an object


def candidate(data: bytes, codemods: Sequence["Codemod"], select: Callable[[str], bool]) -> Optional[Present]:
    """Before pass 1 (no facts yet): None when no selected codemod's token occurs in the file, else
    the token searches made so far, for `codemods_for` to reuse."""
    present = Present(data)
    for cm in selected(codemods, select):
        if present.any_of(cm):
            return present
    return None


def codemods_for(data: bytes, codemods: Sequence["Codemod"], select: Callable[[str], bool], *,
                 module_name: str = "", facts: Optional[RepoFacts] = None,
                 enabled: bool = True, present: Optional[Present] = None) -> List["Codemod"]:
    """The selected codemods that must run on a file (all selected ones when `enabled` is False)."""
    chosen = selected(codemods, select)
    if not enabled:
        return list(chosen)
    has = present or Present(data)
    return [cm for cm in chosen if codemod_wanted(cm, data, module_name, facts, has)]


_SELECTED: Dict[Tuple[int, int], Tuple[Sequence["Codemod"], Callable[[str], bool], List["Codemod"]]] = {}


def selected(codemods: Sequence["Codemod"], select: Callable[[str], bool]) -> List["Codemod"]:
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
    from codemods.amp_object_attr import needles as handle_needles
    needles.update(handle_needles(facts.extra))  # apex amp stored on an object
    from codemods.init_helpers import needles as helper_needles
    needles.update(helper_needles(facts.extra))  # setup helpers' callers
    return tuple(sorted(needles))


def has_fact_names(facts: Optional[RepoFacts]) -> bool:
    """Whether pass 1 published names that make other files' call sites need pass 2."""
    from codemods.amp_object_attr import needles as handle_needles
    from codemods.init_helpers import needles as helper_needles
    return bool(fact_names(facts)) or bool(facts and facts.unmigrated_amp) or \
        bool(facts and (handle_needles(facts.extra) or helper_needles(facts.extra)))  # objects, setup helpers
