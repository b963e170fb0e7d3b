"""`apex2amp explain CODE` and `apex2amp rules`: the rule documentation, ruff style."""
from __future__ import annotations

from typing import Optional

import codemods.registry  # noqa: F401  (importing the codemods registers their rules)
from codemods.base import RULES


def explain_text(code: str) -> Optional[str]:
    r = RULES.get(code.strip().upper())
    if r is None:
        return None
    kind = "fix (rewritten automatically)" if r.fixes else "report (left for you, with guidance)"
    parts = [f"{r.code} ({r.name})", "", r.summary, "", f"Kind: {kind}", f"Severity: {r.severity}", "",
             "## Why", r.why]
    if r.before:
        parts += ["", "## Before", "```python", r.before, "```"]
    if r.after:
        parts += ["", "## After", "```python", r.after, "```"]
    return "\n".join(parts)


def rules_table() -> str:
    lines = []
    for code in sorted(RULES):
        r = RULES[code]
        lines.append(f"{r.code}  {'fix   ' if r.fixes else 'report'}  {r.severity:<7}  {r.summary}")
    return "\n".join(lines)
