"""The plain records codemods and the engine share: rule codes, findings, options, repo facts.

Nothing here imports libcst, so the command line can build a run's settings without importing it.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

FIX = "fix"          # the code was rewritten
WARNING = "warning"  # manual follow-up needed, or behaviour changed in a way the user must know
INFO = "info"        # informational note

SEVERITIES = (FIX, WARNING, INFO)


@dataclass(frozen=True)
class Rule:
    """A stable rule code with the text `apex2amp explain CODE` prints."""

    code: str
    name: str
    summary: str
    fixes: bool
    severity: str
    why: str
    before: str = ""
    after: str = ""
    unsafe: bool = False  # a fix that changes numerics: applied only with --unsafe-fixes
    flags: Tuple[str, ...] = ()  # the run options the example needs (`--dtype`, `bfloat16`): codemods.base


RULES: Dict[str, Rule] = {}


def rule(code: str, name: str, summary: str, *, fixes: bool, severity: str, why: str,
         before: str = "", after: str = "", unsafe: bool = False, flags: Tuple[str, ...] = ()) -> Rule:
    """Register a rule (codes are unique and stable) and return it."""
    if code in RULES and RULES[code].name != name:
        raise ValueError(f"duplicate rule code {code}")
    r = Rule(code, name, summary, fixes, severity, why.strip(), before.strip("\n"), after.strip("\n"), unsafe,
             tuple(flags))
    RULES[code] = r
    return r


@dataclass
class Finding:
    """One change made or one thing left for a human, at a 1-based line/column of the original file."""

    code: str
    message: str
    line: int = 0
    col: int = 0
    severity: str = WARNING
    fixed: bool = False
    new_line: int = 0  # line in the rewritten text, when known
    cell: Optional[int] = None  # notebook cell index, when the file is a notebook
    ignored: bool = False  # suppressed by an `# apex2amp: ignore` comment

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class Options:
    """User-selectable settings that change what codemods emit."""

    dtype: str = "float16"          # "float16" or "bfloat16"
    min_torch: Tuple[int, int] = (2, 4)
    device: str = "cuda"
    target: str = "ddp"             # "ddp" (autocast + GradScaler) or "fsdp2" (codemods/fsdp2.py)
    unsafe_fixes: bool = False      # apply fixes that change numerics (codemods/unsafe_fixes.py)

    @property
    def use_scaler(self) -> bool:
        return self.dtype == "float16"

    @property
    def grad_scaler_callee(self) -> str:
        """Spelling of the GradScaler class for the lowest supported torch."""
        return "torch.amp.GradScaler" if self.min_torch >= (2, 3) else "torch.cuda.amp.GradScaler"

    @property
    def custom_fwd_prefix(self) -> str:
        return "torch.amp" if self.min_torch >= (2, 4) else "torch.cuda.amp"


@dataclass
class RepoFacts:
    """What pass 1 learned about the whole run, shared with every file in pass 2.

    `scaler_functions` maps a module's dotted name to the functions that receive a `scaler`
    parameter in this run, so call sites in other modules pass it along. `unmigrated_amp` lists the
    modules whose apex amp code stays as it is (a finding held it back): the `amp.initialize` that
    sets up their state must stay too.
    """

    scaler_functions: Dict[str, List[str]] = field(default_factory=dict)
    scaler_params: Dict[str, str] = field(default_factory=dict)  # module -> name of the added parameter
    # module -> function -> the scaler parameter's positional slot (-1: keyword-only), for helpers already
    # on torch.amp (codemods/native_scaler.py): a call that fills that slot already passes the scaler
    scaler_slots: Dict[str, Dict[str, int]] = field(default_factory=dict)
    unmigrated_amp: List[str] = field(default_factory=list)
    spawn_entries: Dict[str, Any] = field(default_factory=dict)
    # module -> the names whose unused apex import pass 1 removed, and module -> name -> a file that
    # imports that name from the module (found after pass 1): such an import stays in pass 2
    dropped_imports: Dict[str, List[str]] = field(default_factory=dict)
    reexports: Dict[str, Dict[str, str]] = field(default_factory=dict)
    # threading safety (codemods/amp_threading.py): qualified base class -> the scaler attribute of a class
    # of the run that holds the scaler on `self` and derives from it; module -> its classes whose methods
    # need the scaler and have no binding of their own (such a base then reads `self.<attr>`);
    # facts key -> methods that get a scaler parameter, and -> those of them another file references
    scaler_bases: Dict[str, str] = field(default_factory=dict)
    attr_candidates: Dict[str, List[str]] = field(default_factory=dict)
    scaler_methods: Dict[str, List[str]] = field(default_factory=dict)
    foreign_method_refs: Dict[str, List[str]] = field(default_factory=dict)
    # facts key -> "name path:line": a module-level function of it that another file uses as a value
    foreign_value_refs: Dict[str, List[str]] = field(default_factory=dict)
    # facts key -> "name path:line": a call of its module-level function from a file that keeps apex
    # (migrate/held_callers.py), which could not pass the scaler
    held_callers: Dict[str, List[str]] = field(default_factory=dict)
    # the A2A701 lint (codemods/scaler_calls.py): facts key -> "func" or "Class.method" -> the required
    # scaler parameter's name and positional slot (-1: keyword-only; methods count `self`)
    scaler_required: Dict[str, Dict[str, Tuple[str, int]]] = field(default_factory=dict)
    extra: Dict[str, Any] = field(default_factory=dict)

    def merge(self, other: "RepoFacts") -> None:
        for mod, funcs in other.scaler_functions.items():
            known = self.scaler_functions.setdefault(mod, [])
            known.extend(f for f in funcs if f not in known)
        self.scaler_params.update(other.scaler_params)
        for mod, slots in other.scaler_slots.items():
            self.scaler_slots.setdefault(mod, {}).update(slots)
        self.unmigrated_amp.extend(m for m in other.unmigrated_amp if m not in self.unmigrated_amp)
        self.spawn_entries.update(other.spawn_entries)
        for mod, names in other.dropped_imports.items():
            known = self.dropped_imports.setdefault(mod, [])
            known.extend(n for n in names if n not in known)
        for mod, importers in other.reexports.items():
            self.reexports.setdefault(mod, {}).update(importers)
        self.scaler_bases.update(other.scaler_bases)
        for table in ("attr_candidates", "scaler_methods", "foreign_method_refs", "foreign_value_refs",
                      "held_callers"):
            mine = getattr(self, table)
            for mod, names in getattr(other, table).items():
                known = mine.setdefault(mod, [])
                known.extend(n for n in names if n not in known)
        for mod, required in other.scaler_required.items():
            self.scaler_required.setdefault(mod, {}).update(required)
        for key, value in other.extra.items():
            self.extra.setdefault(key, value)


def module_root(path: str, module_name: str) -> str:
    """The import root of a file: its folder minus the package folders of its dotted module name."""
    if not module_name or path.startswith("<"):
        return ""
    folder = os.path.dirname(os.path.abspath(path))
    depth = module_name.count(".") + (1 if os.path.basename(path) == "__init__.py" else 0)
    for _ in range(depth):
        folder = os.path.dirname(folder)
    return folder


def same_file(key: str, module: str, importer_root: str) -> bool:
    """Whether the facts key `root::mod` is the file that `import module` from `importer_root` reads
    when `module`'s folders hold no `__init__.py` (a namespace package: swav's `src.utils` is
    `src/utils.py`, whose own module name is `utils`)."""
    root, _, mod = key.rpartition("::")
    if not root or not importer_root or mod == module:
        return False
    return os.path.join(root, *mod.split(".")) == os.path.join(importer_root, *module.split("."))


def facts_key(path: str, module_name: str) -> str:
    """`root::module`, so that `utils` of scripts/ and `utils` of tools/ stay apart."""
    root = module_root(path, module_name)
    return f"{root}::{module_name}" if root else module_name
