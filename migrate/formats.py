"""Machine-readable renderings of a run: `json`, `sarif` (2.1.0) and `github` (workflow commands).

`render(result, fmt, mode=..., show_ignored=...)` returns the whole document as text. Field names of the
JSON format are stable (see docs/ecosystem.md); `JSON_VERSION` changes only when one is removed or
changes meaning.
"""
from __future__ import annotations

import dataclasses
import difflib
import json
import os
import re
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple
from urllib.parse import quote

from codemods.records import FIX, INFO, RULES, SEVERITIES, WARNING, Finding, Rule

from . import __version__
if TYPE_CHECKING:
    from .results import FileResult, RunResult

JSON_VERSION = 1
SARIF_SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://pypi.org/project/apex2amp/"


def _load_rules() -> Dict[str, Rule]:
    """Every registered rule (importing the registry registers the codemods' rules)."""
    import codemods.registry  # noqa: F401
    return RULES


def display_path(path: str) -> str:
    """`path` as users see it: relative to the working directory (`../other/x.py` above it), never a
    machine's absolute path; as given only where no relative path exists (another drive on Windows)."""
    if not os.path.isabs(path):
        return path
    try:
        return os.path.relpath(path, os.getcwd())
    except ValueError:  # another drive on Windows
        return path


def patch_path(path: str) -> str:
    """The name of `path` in a unified diff's `a/`/`b/` headers, with `/` separators: relative to the
    working directory for a file below it (apply there); for a file above it, relative to the top of
    its git repository as `git diff` writes it, else to its own folder (apply with `git apply` or
    `patch -p1` in that folder): neither tool applies a `..` or absolute name."""
    rel = display_path(path)
    if os.path.isabs(rel) or rel == os.pardir or rel.startswith(os.pardir + os.sep):
        here = os.path.abspath(path)
        top = _git_top(os.path.dirname(here)) or os.path.dirname(here)
        rel = os.path.relpath(here, top)
    return rel.replace(os.sep, "/")


def _git_top(folder: str) -> Optional[str]:
    cur = folder
    while True:
        if os.path.exists(os.path.join(cur, ".git")):
            return cur
        nxt = os.path.dirname(cur)
        if nxt == cur:
            return None
        cur = nxt


def relative_note(note: Dict[str, Any]) -> Dict[str, Any]:
    """A launch note with its file's path (also inside the torchrun commands) as `display_path` shows it."""
    out = dict(note)
    path = note.get("path")
    if isinstance(path, str) and os.path.isabs(path):
        shown = display_path(path)
        for k, v in note.items():
            if isinstance(v, str):
                out[k] = v.replace(path, shown)
    return out


_AT_LINE = re.compile(r"^syntax error at line (\d+)(?:, column (\d+))?: ")


def error_location(error: str) -> Tuple[int, int, str]:
    """(line, column, message) of a file's error: a syntax error's CPython position moves to the front
    (`path:4:7: error: syntax error: invalid syntax`, as ruff and compilers print it); (0, 0, error) else."""
    m = _AT_LINE.match(error)
    if not m:
        return 0, 0, error
    return int(m.group(1)), max(int(m.group(2) or 1), 1), "syntax error: " + error[m.end():]


def error_text(path: str, error: str) -> str:
    """The one line a file's error is printed as: `path:line:col: error: ...` or `path: error: ...`."""
    line, col, message = error_location(error)
    where = f"{display_path(path)}:{line}:{col}" if line else display_path(path)
    return f"{where}: error: {message}"


def shown_line(fr: FileResult, f: Finding, mode: str) -> int:
    """The line of `f` in the file as it is on disk after this run (rewritten files use the new line)."""
    if mode == "rewrite" and fr.written and f.new_line:
        return f.new_line
    return f.line


def visible_findings(fr: FileResult, show_ignored: bool) -> List[Finding]:
    """The findings of one file to print, sorted by line: suppressed ones only with `show_ignored`."""
    out = [f for f in fr.findings if show_ignored or not f.ignored]
    if os.path.isabs(fr.path):  # a message naming its own file (a torchrun line) names it as the run shows it
        shown = display_path(fr.path).replace(os.sep, "/")
        out = [dataclasses.replace(f, message=f.message.replace(fr.path, shown)) if fr.path in f.message else f
               for f in out]
    return sorted(out, key=lambda f: (f.line, f.col, f.code))


def severity_counts(result: RunResult) -> Dict[str, int]:
    """Number of findings (suppressed ones excluded) per severity, every severity present."""
    counts = {s: 0 for s in SEVERITIES}
    for fr in result.files:
        for f in fr.findings:
            if not f.ignored:
                counts[f.severity] = counts.get(f.severity, 0) + 1
    return counts


def summary_dict(result: RunResult, mode: str) -> Dict[str, Any]:
    """The counts every format reports (JSON `summary`, report header)."""
    ignored = sum(1 for fr in result.files for f in fr.findings if f.ignored)
    return {
        "scanned": result.scanned,
        "changed": len(result.changed),
        "written": sum(1 for fr in result.files if fr.written),
        "errors": len(result.errors),
        "findings": severity_counts(result),
        "open": len(result.open_findings()),
        "ignored": ignored,
        "exit_code": result.exit_code(),
    }


# -- json -----------------------------------------------------------------------------------------


def _finding_json(fr: FileResult, f: Finding, mode: str) -> Dict[str, Any]:
    r = RULES.get(f.code)
    return {
        "code": f.code,
        "name": r.name if r else "",
        "severity": f.severity,
        "fixed": f.fixed,
        "ignored": f.ignored,
        "message": f.message,
        "line": shown_line(fr, f, mode),
        "col": f.col,
        "original_line": f.line,
        "new_line": f.new_line,
        "cell": f.cell,
    }


def render_json(result: RunResult, mode: str, show_ignored: bool = False) -> str:
    """The JSON document: files with a change, an error or a finding, then the summary."""
    _load_rules()
    files = []
    for fr in result.files:
        findings = visible_findings(fr, show_ignored)
        if not (fr.changed or fr.error or findings or fr.launch_notes):
            continue
        files.append({
            "path": display_path(fr.path),
            "kind": fr.kind,
            "changed": fr.changed,
            "written": fr.written,
            "error": fr.error,
            "findings": [_finding_json(fr, f, mode) for f in findings],
            "launch_notes": [relative_note(n) for n in fr.launch_notes],
        })
    doc = {
        "version": JSON_VERSION,
        "tool": {"name": "apex2amp", "version": __version__},
        "mode": mode,
        "files": files,
        "summary": summary_dict(result, mode),
    }
    return json.dumps(doc, indent=2, sort_keys=False) + "\n"


# -- sarif ----------------------------------------------------------------------------------------


def _artifact(path: str, cwd: str) -> Dict[str, Any]:
    """An artifactLocation relative to %SRCROOT% (the working directory; `../x.py` above it): SARIF
    carries no machine's absolute path."""
    ap = os.path.abspath(path)
    try:
        rel = os.path.relpath(ap, cwd)
    except ValueError:  # another drive on Windows
        return {"uri": _file_uri(ap)}
    return {"uri": quote(rel.replace(os.sep, "/")), "uriBaseId": "%SRCROOT%"}


def _file_uri(abspath: str) -> str:
    p = abspath.replace(os.sep, "/")
    if not p.startswith("/"):
        p = "/" + p
    return "file://" + quote(p)


def _rule_help(r: Rule) -> Tuple[str, str]:
    """(plain text, markdown) help of one rule: why, then before/after."""
    text = [r.summary, "", r.why]
    md = [r.summary, "", r.why]
    if r.before:
        text += ["", "Before:", r.before]
        md += ["", "Before:", "```python", r.before, "```"]
    if r.after:
        text += ["", "After:", r.after]
        md += ["", "After:", "```python", r.after, "```"]
    text += ["", f"Suppress with `# apex2amp: ignore[{r.code}]`."]
    md += ["", f"Suppress with `# apex2amp: ignore[{r.code}]`."]
    return "\n".join(text), "\n".join(md)


def _sarif_level(severity: str) -> str:
    return {FIX: "warning", WARNING: "warning", INFO: "note"}.get(severity, "warning")


def _sarif_rule(r: Rule) -> Dict[str, Any]:
    text, md = _rule_help(r)
    return {
        "id": r.code,
        "name": r.name,
        "shortDescription": {"text": r.summary},
        "fullDescription": {"text": r.why or r.summary},
        "help": {"text": text, "markdown": md},
        "defaultConfiguration": {"level": _sarif_level(r.severity)},
        "properties": {"tags": ["apex2amp", "migration", r.severity], "fixes": r.fixes,
                       "severity": r.severity},
    }


def _hunks(old: str, new: str) -> List[Dict[str, Any]]:
    """Line-based SARIF replacements (character-offset regions of `old`) that turn `old` into `new`."""
    a = old.splitlines(keepends=True)
    b = new.splitlines(keepends=True)
    starts = [0]
    for ln in a:
        starts.append(starts[-1] + len(ln))
    out = []
    sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            continue
        rep: Dict[str, Any] = {"deletedRegion": {"charOffset": starts[i1], "charLength": starts[i2] - starts[i1]}}
        if j2 > j1:
            rep["insertedContent"] = {"text": "".join(b[j1:j2])}
        out.append(rep)
    return out


def render_sarif(result: RunResult, mode: str, show_ignored: bool = False) -> str:
    """A SARIF 2.1.0 log with one run: rule metadata, results, fixes for pending rewrites, file errors."""
    rules = _load_rules()
    codes = sorted(rules)
    index = {c: i for i, c in enumerate(codes)}
    cwd = os.getcwd()
    results: List[Dict[str, Any]] = []
    notifications: List[Dict[str, Any]] = []
    for fr in result.files:
        loc_art = _artifact(fr.path, cwd)
        if fr.error:
            notifications.append({
                "level": "error",
                "message": {"text": f"{display_path(fr.path)}: {fr.error}"},
                "locations": [{"physicalLocation": {"artifactLocation": loc_art}}],
                "descriptor": {"id": "file-error"},
            })
            continue
        file_fix: Optional[List[Dict[str, Any]]] = None
        if fr.changed and not fr.written:
            file_fix = _hunks(fr.old_text, fr.new_text)
        for f in visible_findings(fr, show_ignored):
            results.append(_sarif_result(fr, f, mode, loc_art, index, file_fix))
    driver = {
        "name": "apex2amp",
        "version": __version__,
        "semanticVersion": __version__,
        "informationUri": INFORMATION_URI,
        "rules": [_sarif_rule(rules[c]) for c in codes],
    }
    invocation: Dict[str, Any] = {
        "executionSuccessful": not result.errors,
        "exitCode": result.exit_code(),
    }
    if notifications:
        invocation["toolExecutionNotifications"] = notifications
    run = {
        "tool": {"driver": driver},
        "invocations": [invocation],
        "results": results,
        "columnKind": "unicodeCodePoints",
        "properties": {"mode": mode, "summary": summary_dict(result, mode)},
    }
    doc = {"$schema": SARIF_SCHEMA_URI, "version": "2.1.0", "runs": [run]}
    return json.dumps(doc, indent=2) + "\n"


def _sarif_result(fr: FileResult, f: Finding, mode: str, art: Dict[str, Any], index: Dict[str, int],
                  file_fix: Optional[List[Dict[str, Any]]]) -> Dict[str, Any]:
    line = shown_line(fr, f, mode)
    phys: Dict[str, Any] = {"artifactLocation": dict(art)}
    if line > 0 and f.cell is None:
        region: Dict[str, Any] = {"startLine": line}
        if f.col > 0:
            region["startColumn"] = f.col
        phys["region"] = region
    text = f.message
    if f.cell is not None:
        text = f"[cell {f.cell}, line {line}] {text}"
    level = _sarif_level(f.severity)
    if f.fixed and fr.written:
        level = "note"  # already rewritten: informational
    res: Dict[str, Any] = {
        "ruleId": f.code,
        "level": level,
        "message": {"text": text},
        "locations": [{"physicalLocation": phys}],
        "properties": {"severity": f.severity, "fixed": f.fixed, "originalLine": f.line},
    }
    if f.code in index:
        res["ruleIndex"] = index[f.code]
    if f.fixed and file_fix:
        res["fixes"] = [{
            "description": {"text": f"apex2amp rewrite (whole-file migration): {f.message}"},
            "artifactChanges": [{"artifactLocation": dict(art), "replacements": file_fix}],
        }]
    if f.ignored:
        res["suppressions"] = [{"kind": "inSource", "justification": "# apex2amp: ignore"}]
    return res


# -- github ---------------------------------------------------------------------------------------


def _gh_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _gh_prop(text: str) -> str:
    return _gh_data(text).replace(":", "%3A").replace(",", "%2C")


def _gh_level(fr: FileResult, f: Finding) -> str:
    """`notice` for notes and for fixes, applied or pending (GitHub shows 10 warnings a step: those are
    left to what needs a human)."""
    if f.severity == INFO or f.fixed:
        return "notice"
    return "warning"


def render_github(result: RunResult, mode: str, show_ignored: bool = False) -> str:
    """GitHub Actions workflow commands: one `::warning file=..,line=..,col=..,title=CODE::message` a finding."""
    lines: List[str] = []
    for fr in sorted(result.files, key=lambda x: x.path):
        path = _gh_prop(display_path(fr.path).replace(os.sep, "/"))
        if fr.error:
            eline, ecol, _ = error_location(fr.error)
            at = f",line={eline},col={ecol}" if eline and fr.kind != "notebook" else ""
            lines.append(f"::error file={path}{at},title=apex2amp::{_gh_data(fr.error)}")
            continue
        if fr.changed and not fr.written:
            lines.append(f"::notice file={path},title=apex2amp::{_gh_data('apex2amp rewrite would change this file')}")
        for f in visible_findings(fr, show_ignored):
            line = shown_line(fr, f, mode)
            props = [f"file={path}"]
            if f.cell is not None:
                props.append("line=1")  # a cell's line is not a line of the notebook's JSON
            elif line > 0:
                props.append(f"line={line}")
                if f.col > 0:
                    props.append(f"col={f.col}")
            props.append(f"title={_gh_prop(f.code)}")
            msg = f.message + (" (ignored)" if f.ignored else "")
            if f.cell is not None:
                msg = f"[cell {f.cell}, line {line}] {msg}"
            lines.append(f"::{_gh_level(fr, f)} {','.join(props)}::{_gh_data(f'{f.code} {msg}')}")
    s = summary_dict(result, mode)
    wrote = mode == "rewrite" and s["written"]
    fixes = sum(1 for fr in result.files for f in fr.findings if f.fixed and not f.ignored)
    lines.append(f"apex2amp: {s['scanned']} file(s) scanned, {s['changed']} "
                 f"{'changed' if wrote else 'to change'}, {s['errors']} error(s); "
                 f"{fixes} {'fixed' if wrote else 'fixable'}, {s['open']} need review")
    return "\n".join(lines) + "\n"


RENDERERS = {"json": render_json, "sarif": render_sarif, "github": render_github}


def render(result: RunResult, fmt: str, *, mode: str, show_ignored: bool = False) -> str:
    """Render `result` as `fmt` (json, sarif or github)."""
    try:
        fn = RENDERERS[fmt]
    except KeyError:
        raise ValueError(f"unknown format {fmt!r} (known: {', '.join(sorted(RENDERERS))})") from None
    return fn(result, mode, show_ignored)


__all__ = ["render", "display_path", "render_json", "render_sarif", "render_github", "summary_dict", "severity_counts",
           "shown_line", "visible_findings", "JSON_VERSION"]
