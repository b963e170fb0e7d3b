"""Rule selectors of `--select/--ignore` and `[tool.apex2amp]`: every one must name a rule code or a
prefix of one (ruff's "unknown rule selector"), checked against the rule registry itself."""
from __future__ import annotations

from typing import Iterable, List


class UnknownSelector(ValueError):
    """A selector that matches no rule: a usage error (exit 2)."""


def known_codes() -> List[str]:
    """Every rule code the codemods register (importing them registers their rules)."""
    import codemods.registry  # noqa: F401
    from codemods.base import RULES
    return sorted(RULES)


def check_selectors(selectors: Iterable[str]) -> None:
    """Raise UnknownSelector for the first selector that is neither `ALL` nor a prefix of a rule code."""
    wanted = [s.strip().upper() for s in selectors if s.strip()]
    if not wanted:
        return
    codes = known_codes()
    for s in wanted:
        if s != "ALL" and not any(c.startswith(s) for c in codes):
            raise UnknownSelector(f"unknown rule selector: {s}")
