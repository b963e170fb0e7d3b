"""Printing a run: changed files, diffs, findings (`path:line:col: CODE message`) and a summary."""
from __future__ import annotations

import difflib
import os
import sys
from typing import List, Optional

import click

from .engine import FileResult, RunResult


def unified_diff(fr: FileResult) -> str:
    a = fr.old_text.splitlines(keepends=True)
    b = fr.new_text.splitlines(keepends=True)
    lines = list(difflib.unified_diff(a, b, fromfile=f"a/{fr.path}", tofile=f"b/{fr.path}"))
    out = []
    for ln in lines:
        out.append(ln if ln.endswith("\n") else ln + "\n\\ No newline at end of file\n")
    return "".join(out)


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


def finding_lines(result: RunResult, mode: str, show_ignored: bool = False) -> List[str]:
    rows = []
    for fr in result.files:
        for f in fr.findings:
            if f.ignored and not show_ignored:
                continue
            line = f.new_line if (mode == "rewrite" and fr.written and f.new_line) else f.line
            tag = " (ignored)" if f.ignored else ""
            cell = f" [cell {f.cell}]" if f.cell is not None else ""
            rows.append((fr.path, line, f.col, f.code,
                         f"{fr.path}:{line}:{max(f.col, 1)}:{cell} {f.code} {f.message}{tag}"))
    rows.sort(key=lambda r: (r[0], r[1], r[2], r[3]))
    return [r[4] for r in rows]


def emit_run(result: Optional[RunResult], *, mode: str, diff: bool, fmt: str, report: Optional[str],
             output: Optional[str], quiet: bool, verbose: bool, show_ignored: bool, color: Optional[bool]) -> int:
    if result is None:
        return 2
    use_color = sys.stdout.isatty() if color is None else color
    if fmt != "text":
        from .formats import render
        text = render(result, fmt, mode=mode, show_ignored=show_ignored)
        if output:
            with open(output, "w", encoding="utf-8") as fh:
                fh.write(text)
        else:
            click.echo(text, nl=not text.endswith("\n"))
    for fr in result.errors:
        click.echo(f"{fr.path}: error: {fr.error}", err=True)
    if report:
        from .report import write_report
        write_report(result, report, mode=mode)
    if fmt == "text" and not quiet:
        if diff:
            for fr in result.changed:
                d = unified_diff(fr)
                click.echo(_colour_diff(d) if use_color else d, nl=False)
        else:
            verb = "rewrote" if mode == "rewrite" else "would rewrite"
            for fr in result.changed:
                click.echo(f"{verb} {fr.path}")
        if verbose:
            for fr in result.files:
                if not fr.changed and not fr.error:
                    click.echo(f"unchanged {fr.path}")
        for line in finding_lines(result, mode, show_ignored):
            click.echo(line)
        notes = [n for fr in result.files for n in fr.launch_notes]
        for n in notes:
            if n.get("command"):
                click.echo(f"launch: {n.get('path', '')}: {n['command']}")
                if n.get("multi_node"):
                    click.echo(f"        multi-node: {n['multi_node']}")
        open_n = len(result.open_findings())
        changed = len(result.changed)
        verb = "changed" if mode == "rewrite" and not diff else "to change"
        summary = (f"{result.scanned} file(s) scanned, {changed} {verb}, {open_n} finding(s) to review, "
                   f"{len(result.errors)} error(s)")
        click.echo(click.style(summary, bold=True) if use_color else summary, err=not diff and False)
    return result.exit_code()
