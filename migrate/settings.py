"""A run's settings: the rule selection and RunConfig. Nothing here imports libcst, so the command
line builds them before libcst is imported."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from codemods.records import Options

# garbage-collector thresholds while apex2amp runs: libcst trees are large, short-lived and acyclic
# (engine._quiet_gc), and importing libcst creates thousands of objects (cli.console_main)
QUIET_GC = (100_000, 50, 100)


class Selection:
    """`--select/--ignore` in ruff's style: codes are matched by prefix; ignore wins on ties in length."""

    def __init__(self, select: Sequence[str] = (), ignore: Sequence[str] = ()):
        self.select = [s.strip().upper() for s in select if s.strip()]
        self.ignore = [s.strip().upper() for s in ignore if s.strip()]

    def takes_every_rule(self) -> bool:
        """Whether every rule passes (no --ignore, no --select narrower than ALL)."""
        return not self.ignore and (not self.select or "ALL" in self.select)

    def __call__(self, code: str) -> bool:
        sel = max((len(s) for s in self.select if code.startswith(s) or s == "ALL"), default=-1) \
            if self.select else 0
        ign = max((len(s) for s in self.ignore if code.startswith(s) or s == "ALL"), default=-1)
        if sel < 0:
            return False
        return ign < sel or (ign < 0)


@dataclass
class RunConfig:
    """How one run goes: what codemods emit, which rules and files, writing, workers, cache."""

    options: Options = field(default_factory=Options)
    select: Selection = field(default_factory=Selection)
    excludes: Sequence[str] = ()
    write: bool = False
    jobs: int = 1
    per_file_ignores: Dict[str, List[str]] = field(default_factory=dict)
    prefilter: bool = True  # False: every selected codemod sees every file (for exactness tests)
    cache_dir: Optional[str] = None  # a folder for migrate.cache (None: no cache; the CLI sets one)

    def settings_key(self) -> str:
        """What, besides a file and the tool, decides a file's result (names the cache bucket)."""
        return repr((self.options, self.select.select, self.select.ignore,
                     sorted((k, list(v)) for k, v in self.per_file_ignores.items()), self.prefilter))
