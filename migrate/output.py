"""Printing a run: changed files, diffs, findings (`path:line:col: CODE message`) and a summary.

Colour appears only on a terminal (or with --color, FORCE_COLOR; never with NO_COLOR); piped output is
plain. The progress bar: migrate/progress.py.
With `--diff`, stdout carries only the patch; findings and the summary go to stderr.
"""
from __future__ import annotations

import contextlib
import io
import os
import sys
from typing import TYPE_CHECKING, List, Optional

import click

from codemods.records import FIX, INFO, WARNING

if TYPE_CHECKING:  # annotations only
    from .results import RunResult
from .formats import display_path, error_text, relative_note, visible_findings
from .unified_diff import unified_diff


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
