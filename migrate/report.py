"""`--report MIGRATION.md`: a Markdown migration report to paste into a pull request description.

Header with counts, then per file the rewrites made (with rule codes), the manual follow-ups (line,
message, what the rule is about), the torchrun commands that replace old launches, and a verification
summary read from the harness's JSON (`--verify-json`), read defensively: unknown shapes are skipped.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional

from codemods.base import FIX, INFO, RULES, WARNING, Finding

from . import __version__
from .results import FileResult, RunResult
from .formats import _load_rules, display_path, relative_note, shown_line, summary_dict, visible_findings

MAX_DIFF_LINES = 300


def _display(path: str) -> str:
    return display_path(path).replace(os.sep, "/")


def _md_inline(text: str) -> str:
    """One line of text that cannot break the Markdown list or table it sits in."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _where(fr: FileResult, f: Finding, mode: str) -> str:
    line = shown_line(fr, f, mode)
    where = f"line {line}" if line else "file"
    if f.cell is not None:
        where = f"cell {f.cell}, {where}"
    return where


def _finding_item(fr: FileResult, f: Finding, mode: str, checkbox: bool) -> str:
    r = RULES.get(f.code)
    box = "- [ ] " if checkbox else "- "
    tail = " _(ignored)_" if f.ignored else ""
    hint = f" ({_md_inline(r.summary)}; `apex2amp explain {f.code}`)" if (checkbox and r) else ""
    return f"{box}{_where(fr, f, mode)}: `{f.code}` {_md_inline(f.message)}{hint}{tail}"


def _diff_block(fr: FileResult) -> List[str]:
    from .unified_diff import unified_diff
    diff = unified_diff(fr).splitlines()
    cut = len(diff) > MAX_DIFF_LINES
    body = diff[:MAX_DIFF_LINES] + ([f"... ({len(diff) - MAX_DIFF_LINES} more lines)"] if cut else [])
    return ["<details><summary>Pending diff</summary>", "", "```diff", *body, "```", "", "</details>", ""]


def _file_section(fr: FileResult, mode: str, show_ignored: bool) -> List[str]:
    findings = visible_findings(fr, show_ignored)
    fixes = [f for f in findings if f.fixed]
    follow = [f for f in findings if not f.fixed and f.severity != INFO]
    notes = [f for f in findings if not f.fixed and f.severity == INFO]
    if not (fr.changed or fr.error or findings or fr.launch_notes):
        return []
    out = [f"### `{_display(fr.path)}`", ""]
    if fr.error:
        out += [f"**Not processed:** {_md_inline(fr.error)}", ""]
        return out
    if fixes or fr.changed:
        title = "Changes made" if fr.written else ("Changes pending (nothing written)" if fr.changed else "Changes")
        out += [f"**{title}:**", ""]
        out += [_finding_item(fr, f, mode, False) for f in fixes] or ["- rewritten (no rule-level detail)"]
        out.append("")
    if follow:
        out += ["**Manual follow-ups:**", ""]
        out += [_finding_item(fr, f, mode, True) for f in follow]
        out.append("")
    if notes:
        out += ["**Notes:**", ""]
        out += [_finding_item(fr, f, mode, False) for f in notes]
        out.append("")
    launches = [relative_note(n) for n in fr.launch_notes if isinstance(n, dict) and n.get("command")]
    if launches:
        out += ["**Launch with torchrun:**", ""]
        for n in launches:
            out += ["```sh", str(n["command"]), "```"]
            if n.get("multi_node"):
                mn = n["multi_node"]
                out += ["Multi-node:", "", "```sh", str(mn), "```"] if "torchrun" in str(mn) else [
                    f"Multi-node: {_md_inline(mn)}"]
            out.append("")
    if fr.changed and not fr.written:
        out += _diff_block(fr)
    return out


# -- verification ---------------------------------------------------------------------------------


def load_verify_json(path: str) -> Dict[str, Any]:
    """The harness's verdict JSON, or {"error": ...} when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as e:
        return {"error": f"cannot read {path}: {e}"}
    if not isinstance(data, dict):
        return {"error": f"{path}: expected a JSON object, got {type(data).__name__}"}
    return data


def _scalar(v: Any) -> bool:
    return isinstance(v, (str, int, float, bool)) or v is None


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if v is None:
        return ""
    return _md_inline(v)


def _verdict(data: Dict[str, Any]) -> str:
    verdict = data.get("verdict")
    passed = data.get("passed")
    if isinstance(verdict, str) and verdict:
        word = verdict.upper()
    elif isinstance(passed, bool):
        word = "PASS" if passed else "FAIL"
    else:
        word = "UNKNOWN"
    mark = {"PASS": "✅", "PASSED": "✅", "FAIL": "❌", "FAILED": "❌"}.get(word, "⚠️")
    return f"{mark} **{word}**"


def _step_rows(data: Dict[str, Any]) -> Optional[List[Dict[str, Any]]]:
    for key in ("steps", "per_step", "comparison", "rows"):
        rows = data.get(key)
        if isinstance(rows, list) and rows and all(isinstance(r, dict) for r in rows):
            return rows
    return None


def verify_section(data: Dict[str, Any], max_rows: int = 20) -> List[str]:
    """Markdown lines summarising a verify JSON: verdict, scalar facts, a per-step table when present."""
    out = ["## Verification", ""]
    if "error" in data and len(data) == 1:
        return out + [f"Verification results unavailable: {_md_inline(data['error'])}", ""]
    out += [f"Verdict: {_verdict(data)}", ""]
    facts = [(k, v) for k, v in data.items() if _scalar(v) and k not in ("verdict", "passed")]
    for k, v in facts[:20]:
        out.append(f"- {_md_inline(k)}: {_fmt(v)}")
    reasons = data.get("reasons") or data.get("messages") or data.get("notes")
    if isinstance(reasons, list):
        out += [f"- {_md_inline(r)}" for r in reasons[:20] if _scalar(r)]
    if facts or isinstance(reasons, list):
        out.append("")
    rows = _step_rows(data)
    if rows:
        cols: List[str] = []
        for r in rows:
            for k, v in r.items():
                if _scalar(v) and k not in cols:
                    cols.append(k)
        cols = cols[:8]
        if cols:
            out.append("| " + " | ".join(_md_inline(c) for c in cols) + " |")
            out.append("| " + " | ".join("---" for _ in cols) + " |")
            for r in rows[:max_rows]:
                out.append("| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |")
            if len(rows) > max_rows:
                out.append(f"\n_{len(rows) - max_rows} more step(s) in the JSON._")
            out.append("")
    return out


# -- the report -----------------------------------------------------------------------------------


def render_report(result: RunResult, mode: str = "rewrite", verify: Optional[Dict[str, Any]] = None,
                  show_ignored: bool = False) -> str:
    """The whole Markdown report as text."""
    _load_rules()
    s = summary_dict(result, mode)
    counts = s["findings"]
    wrote = mode == "rewrite" and s["written"] > 0
    out = ["# apex2amp migration report", ""]
    intro = (f"Generated by apex2amp {__version__} (`apex2amp {mode}`). "
             + ("Line numbers refer to the rewritten files." if wrote else
                "Nothing was written; line numbers refer to the files as they are."))
    out += [intro, ""]
    out += ["| | count |", "| --- | --- |",
            f"| files scanned | {s['scanned']} |",
            f"| files {'changed' if wrote else 'to change'} | {s['changed']} |",
            f"| rewrites ({FIX}) | {counts.get(FIX, 0)} |",
            f"| manual follow-ups ({WARNING}) | {counts.get(WARNING, 0)} |",
            f"| notes ({INFO}) | {counts.get(INFO, 0)} |",
            f"| suppressed (`# apex2amp: ignore`) | {s['ignored']} |",
            f"| files with errors | {s['errors']} |", ""]
    sections: List[str] = []
    for fr in sorted(result.files, key=lambda x: x.path):
        sections += _file_section(fr, mode, show_ignored)
    if sections:
        out += ["## Files", ""] + sections
    else:
        out += ["Nothing to migrate.", ""]
    if verify is not None:
        out += verify_section(verify)
    return "\n".join(out).rstrip("\n") + "\n"


def write_report(result: RunResult, path: str, mode: str = "rewrite", verify_json: Optional[str] = None,
                 show_ignored: bool = False) -> None:
    """Write the Markdown report of `result` to `path` (with the verify summary when `verify_json`)."""
    verify = load_verify_json(verify_json) if verify_json else None
    text = render_report(result, mode=mode, verify=verify, show_ignored=show_ignored)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
