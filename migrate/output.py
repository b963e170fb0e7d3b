"""Printing a run: changed files, diffs, findings (`path:line:col: CODE message`) and a summary.

Colour appears only on a terminal (or with --color, FORCE_COLOR; never with NO_COLOR); piped output is
plain. The progress bar: migrate/progress.py.
With `--diff`, stdout carries only the patch; findings and the summary go to stderr.
"""
from __future__ import annotations

import contextlib
import difflib
import io
import os
import re
import sys
from typing import TYPE_CHECKING, List, Optional

import click

from codemods.records import FIX, INFO, WARNING

if TYPE_CHECKING:  # the engine imports libcst, which `progress` (used before a run) must not wait for
    from .engine import FileResult, RunResult
from .formats import display_path, error_text, patch_path, relative_note, visible_findings
from .linediff import shared_ends

_CONTEXT = 3  # difflib's default: lines of context around each change
_HUNK = re.compile(r"@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@")
_LINES = re.compile(r"[^\n]*\n|[^\n]+")  # lines as patch tools count them: `\n` ends one, nothing else


def unified_diff(fr: FileResult) -> str:
    """The unified diff of one file's rewrite (`a/path` -> `b/path`).

    Lines end at `\n` only, as `git apply` and `patch` count them (`str.splitlines` would also end
    one at a form feed). difflib aligns only the lines between those both texts share at their start
    and end, less twice the context it shows (a rewrite changes a few lines of a long file), and the
    hunks' line numbers are moved back to the whole file's. Where a change slid to the edge of that
    window along repeated lines, so that its hunk would show less context than difflib's, the whole
    texts are diffed instead. The same diff as difflib's of the whole texts wherever no change can
    slide along repeated lines; an equally valid patch elsewhere."""
    a = _LINES.findall(fr.old_text)
    b = _LINES.findall(fr.new_text)
    name = patch_path(fr.path)
    head, tail = shared_ends(a, b)
    # the context, and as much again: where a change sits next to repeated lines (blank ones), difflib
    # may place it a few lines into the shared run, and its hunk then shows context from there
    lo, cut = max(0, head - 2 * _CONTEXT), max(0, tail - 2 * _CONTEXT)
    lines = _diff_lines(a[lo:len(a) - cut], b[lo:len(b) - cut], name)
    if (lo or cut) and not _full_context(lines, lo > 0, cut > 0):
        lo = 0
        lines = _diff_lines(a, b, name)
    out = []
    for ln in lines:
        if lo and ln.startswith("@@"):
            ln = _HUNK.sub(lambda m: f"@@ -{int(m.group(1)) + lo}{m.group(2) or ''} "
                                     f"+{int(m.group(3)) + lo}{m.group(4) or ''} @@", ln, count=1)
        out.append(ln if ln.endswith("\n") else ln + "\n\\ No newline at end of file\n")
    return "".join(out)


def _diff_lines(a: List[str], b: List[str], name: str) -> List[str]:
    return list(difflib.unified_diff(a, b, fromfile=f"a/{name}", tofile=f"b/{name}", n=_CONTEXT))


def _full_context(lines: List[str], first: bool, last: bool) -> bool:
    """Whether the first hunk opens (when `first`) and the last one closes (when `last`) with the
    full context: lines of a window's diff that slid to its edge do not."""
    hunks = [k for k, ln in enumerate(lines) if ln.startswith("@@")]
    if not hunks:
        return True
    if first and not all(ln.startswith(" ") for ln in lines[hunks[0] + 1:hunks[0] + 1 + _CONTEXT]):
        return False
    return not last or all(ln.startswith(" ") for ln in lines[-_CONTEXT:])


def _colour_diff(text: str) -> str:
    out = []
    for ln in text.splitlines(keepends=True):
        if ln.startswith("+++") or ln.startswith("---"):
            out.append(click.style(ln, bold=True))
        elif ln.startswith("+"):
            out.append(click.style(ln, fg="green"))
        elif ln.startswith("-"):
            out.append(click.style(ln, fg="red"))
        elif ln.startswith("@@"):
            out.append(click.style(ln, fg="cyan"))
        else:
            out.append(ln)
    return "".join(out)


_CODE_COLOUR = {FIX: "green", WARNING: "yellow", INFO: "blue"}


def finding_lines(result: RunResult, mode: str, show_ignored: bool = False, color: bool = False) -> List[str]:
    """`path:line:col: CODE message` lines, 1-based, sorted by file, line, column and code."""
    rows = []
    for fr in result.files:
        for f in visible_findings(fr, show_ignored):
            line = f.new_line if (mode == "rewrite" and fr.written and f.new_line) else f.line
            tag = " (ignored)" if f.ignored else ""
            cell = f"cell {f.cell}:" if f.cell is not None else ""  # ruff's `nb.ipynb:cell 3:2:1:`
            loc = f"{display_path(fr.path)}:{cell}{line}:{max(f.col, 1)}:"
            code = f.code
            if color:
                loc = click.style(loc, bold=True)
                code = click.style(code, fg=_CODE_COLOUR.get(f.severity, "yellow"), bold=True)
            mark = " [*]" if f.fixed else ""  # ruff's mark of a fixable (here: fixed or pending) finding
            rows.append((fr.path, f.cell or 0, line, f.col, f.code,
                         f"{loc} {code}{mark} {f.message}{tag}"))
    rows.sort(key=lambda r: r[:5])
    return [r[5] for r in rows]


def summary_line(result: RunResult, mode: str, diff: bool) -> str:
    """The one-line summary printed at the end of a text run; it ends with what was fixed (rewrite) or
    is fixable (check, --diff) and what needs a human: "..., 12 fixed, 2 need review"."""
    open_n = len(result.open_findings())
    ignored = sum(1 for fr in result.files for f in fr.findings if f.ignored)
    fixes = sum(1 for fr in result.files for f in fr.findings if f.fixed and not f.ignored)
    changed = len(result.changed)
    wrote = mode == "rewrite" and not diff
    verb = "changed" if wrote else "to change"
    text = f"{result.scanned} file(s) scanned, {changed} {verb}, {len(result.errors)} error(s)"
    if ignored:
        text += f", {ignored} ignored"
    return text + f"; {fixes} {'fixed' if wrote else 'fixable'}, {open_n} need review"


def folders_without_files(result: Optional[RunResult], paths) -> List[str]:
    """The folders among `paths` in which the run found no file to look at (ruff warns of those)."""
    if result is None:
        return []
    seen = [os.path.abspath(fr.path) for fr in result.files]
    out = []
    for p in paths:
        if os.path.isdir(p):
            top = os.path.join(os.path.abspath(p), "")
            if not any(s.startswith(top) for s in seen):
                out.append(p)
    return out


def wants_color(stream) -> bool:
    """Colour by the conventions of no-color.org and force-color.org: a non-empty NO_COLOR turns it
    off, then a non-empty FORCE_COLOR on; otherwise only on a terminal (--color/--no-color decide first)."""
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def emit_run(result: Optional[RunResult], *, mode: str, diff: bool, fmt: str, report: Optional[str],
             output: Optional[str], quiet: bool, verbose: bool, show_ignored: bool, color: Optional[bool],
             verify_json: Optional[str] = None) -> int:
    """Print (or write) a run in the chosen format and return the exit code."""
    if result is None:
        return 2
    use_color = wants_color(sys.stdout) if color is None else color
    if fmt != "text":
        from .formats import render
        text = render(result, fmt, mode=mode, show_ignored=show_ignored)
        if output:
            with open(output, "w", encoding="utf-8") as fh:
                fh.write(text)
        else:
            click.echo(text, nl=not text.endswith("\n"))
    for fr in result.errors:
        click.echo(error_text(fr.path, fr.error or ""), err=True)
    if report:
        from .report import write_report
        write_report(result, report, mode=mode, verify_json=verify_json, show_ignored=show_ignored)
    if fmt == "text" and not quiet:
        _emit_text(result, mode, diff, verbose, show_ignored, use_color, output)
    return result.exit_code()


def _emit_text(result: RunResult, mode: str, diff: bool, verbose: bool, show_ignored: bool, use_color: bool,
               output: Optional[str]) -> None:
    if output and not diff:  # `--output FILE`: what stdout would show, uncoloured, in the file
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            _emit_text(result, mode, diff, verbose, show_ignored, False, None)
        with open(output, "w", encoding="utf-8") as fh:
            fh.write(buf.getvalue())
        return
    to_err = diff  # keep stdout a clean patch
    if diff:
        patch = "".join(unified_diff(fr) for fr in result.changed)
        if output:
            with open(output, "w", encoding="utf-8") as fh:
                fh.write(patch)
        else:
            click.echo(_colour_diff(patch) if use_color else patch, nl=False, color=use_color)
    else:
        verb = "rewrote" if mode == "rewrite" else "would rewrite"
        for fr in result.changed:
            click.echo(f"{verb} {display_path(fr.path)}")
    if verbose:
        for fr in result.files:
            if not fr.changed and not fr.error:
                click.echo(f"unchanged {display_path(fr.path)}", err=to_err)
    for line in finding_lines(result, mode, show_ignored, color=use_color):
        click.echo(line, err=to_err, color=use_color)
    for fr in result.files:
        for n in fr.launch_notes:
            if isinstance(n, dict) and n.get("command"):
                n = relative_note(n)
                click.echo(f"launch: {display_path(str(n.get('path') or fr.path))}: {n['command']}", err=to_err)
                if n.get("multi_node"):
                    click.echo(f"        multi-node: {n['multi_node']}", err=to_err)
    summary = summary_line(result, mode, diff)
    click.echo(click.style(summary, bold=True) if use_color else summary, err=to_err, color=use_color)
