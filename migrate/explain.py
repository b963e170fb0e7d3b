"""`apex2amp explain CODE` and `apex2amp rules`: the rule documentation, ruff style."""
from __future__ import annotations

from typing import Optional

import codemods.registry  # noqa: F401  (importing the codemods registers their rules)
from codemods.base import RULES


def explain_text(code: str) -> Optional[str]:
    """What rule `code` does, why, a before/after example and its severity (None for an unknown code)."""
    r = RULES.get(code.strip().upper())
    if r is None:
        return None
    kind = "fix (rewritten automatically)" if r.fixes else "report (left for you, with guidance)"
    parts = [f"{r.code} ({r.name})", "", r.summary, "", f"Kind: {kind}", f"Severity: {r.severity}", "",
             "## Why", r.why]
    if r.before:
        parts += ["", "## Before", "```python", r.before, "```"]
    after = r.after or ("# (nothing: the code above is removed)" if r.fixes else
                        "# (no mechanical equivalent: see Why)")
    if r.before or r.after:
        parts += ["", "## After", "```python", after, "```"]
    parts += ["", "## Suppress", f"Add `# apex2amp: ignore[{r.code}]` to the line (or alone on the line above "
              f"a multi-line statement), or `ignore = [\"{r.code}\"]` under [tool.apex2amp] in pyproject.toml."]
    return "\n".join(parts)


def rules_table() -> str:
    """One line a rule: code, fix/report, severity, summary; sorted by code."""
    lines = []
    for code in sorted(RULES):
        r = RULES[code]
        lines.append(f"{r.code}  {'fix   ' if r.fixes else 'report'}  {r.severity:<7}  {r.summary}")
    return "\n".join(lines)
