"""Which rule family migrates an apex name, so that a use left behind because its own rule is
deselected (`--select A2A2` on a file using amp) is not reported as "migrate this use by hand"."""
from __future__ import annotations

from typing import Callable, Iterable, Tuple

from .base import RULES


def owner_families(qualified: str) -> Tuple[str, ...]:
    """Rule-code prefixes of the codemods that migrate the apex name `qualified`."""
    if qualified == "apex" or qualified == "apex.amp" or qualified.startswith("apex.amp."):
        return ("A2A1",)
    if qualified == "apex.parallel" or qualified.startswith("apex.parallel."):
        return ("A2A2",)
    if qualified.startswith("apex.fp16_utils"):
        return ("A2A3", "A2A5")
    if qualified.startswith("apex."):
        return ("A2A3",)
    return ()


def owner_deselected(qualified_names: Iterable[str], enabled: Callable[[str], bool]) -> bool:
    """Whether a rule of a family that migrates one of `qualified_names` is left out of the run."""
    families = {fam for q in qualified_names for fam in owner_families(q)}
    return any(code.startswith(fam) and not enabled(code) for fam in families for code in RULES)
