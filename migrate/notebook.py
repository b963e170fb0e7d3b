"""Jupyter notebooks: code cells are migrated like one module, everything else is kept.

The code cells are joined into one text (with a marker line between cells) so names that cross cells
(`amp` imported in cell 1, used in cell 3) resolve; IPython magics (`%x`, `!cmd`, `x = !cmd`,
`obj?`) are masked as `pass` lines before parsing and restored after, and cells that start with a cell
magic (`%%bash`) are left alone. If the joined rewrite moves a cell marker, or some cell does not
parse, each cell is rewritten on its own instead. A cell whose code does not change keeps its exact
source, and a changed cell keeps its trailing blank lines; the file is rewritten only when some cell's
code changed. Outputs, metadata, key order, indentation and the trailing newline of the JSON file are
kept; findings carry the cell index and the line in the cell.
"""
from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Optional, Tuple

from codemods.base import Finding

MARKER = "# apex2amp-cell-boundary {}"
_MARKER_RX = re.compile(r"^# apex2amp-cell-boundary (\d+)$")
_MASK = "pass  # apex2amp-magic {}"
_MASK_RX = re.compile(r"^(\s*)pass  # apex2amp-magic (\d+)$")


def _is_magic(line: str) -> bool:
    s = line.strip()
    if not s or s.startswith("#"):
        return False
    if s[0] in "%!":
        return True
    if re.match(r"^[\w.]+\s*=\s*[%!]", s):
        return True
    return bool(re.match(r"^[\w.]+\?\??$", s))


def mask_magics(code: str, store: List[str]) -> str:
    """Replace IPython magic lines by `pass` placeholders (their text goes to `store`)."""
    out = []
    for line in code.split("\n"):
        if _is_magic(line):
            indent = line[: len(line) - len(line.lstrip())]
            out.append(indent + _MASK.format(len(store)))
            store.append(line)
        else:
            out.append(line)
    return "\n".join(out)


def unmask_magics(code: str, store: List[str]) -> str:
    out = []
    for line in code.split("\n"):
        m = _MASK_RX.match(line)
        out.append(store[int(m.group(2))] if m and int(m.group(2)) < len(store) else line)
    return "\n".join(out)


def _cell_text(cell: Dict[str, Any]) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def _set_cell_text(cell: Dict[str, Any], text: str) -> None:
    """Store `text` as the cell's source: a list of lines (each keeping its "\n") or one string."""
    if isinstance(cell.get("source"), list):
        lines = text.split("\n")  # only "\n" ends a line: a "\f" or "\r" inside a line stays in it
        cell["source"] = [ln + "\n" for ln in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
    else:
        cell["source"] = text


def _indent_of(raw: str) -> Optional[Any]:
    """The JSON indentation of the file: an int, a string such as '\\t', or None (one line)."""
    m = re.search(r"\n([ \t]+)\"", raw)
    if not m:
        return None
    ws = m.group(1)
    return len(ws) if set(ws) == {" "} else ws


def dump_like(nb: Any, raw: str) -> str:
    """Serialise `nb` the way `raw` was written (indent, ASCII escaping, trailing newline)."""
    indent = _indent_of(raw)
    ascii_only = bool(re.search(r"\\u[0-9a-fA-F]{4}", raw)) and raw.isascii()
    text = json.dumps(nb, indent=indent, ensure_ascii=ascii_only,
                      separators=(",", ": ") if indent is not None else None)
    if raw.endswith("\n"):
        text += "\n"
    return text


def _code_cells(nb: Dict[str, Any]) -> List[int]:
    out = []
    for i, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        text = _cell_text(cell)
        if text.lstrip().startswith("%%"):
            continue
        out.append(i)
    return out


def _rewrite_joined(nb, cells: List[int], rewrite) -> Optional[Tuple[Dict[int, str], List[Finding], Any]]:
    """Rewrite all code cells as one module; None when a marker moved or the text does not parse."""
    store: List[str] = []
    parts: List[str] = []
    for i in cells:
        parts.append(MARKER.format(i))
        parts.append(mask_magics(_cell_text(nb["cells"][i]), store).rstrip("\n"))
    joined = "\n".join(parts) + "\n"
    res = rewrite(joined)
    if res.error is not None:
        return None
    if res.new_text == joined:
        return {}, _findings_in_cells(res.findings, joined), res  # no code changed: no cell is touched
    new_cells: Dict[int, List[str]] = {}
    current = None
    for ln in res.new_text.split("\n"):
        m = _MARKER_RX.match(ln)
        if m:
            current = int(m.group(1))
            new_cells[current] = []
            continue
        if current is None:
            if ln.strip():
                return None  # something was inserted before the first cell
            continue
        new_cells[current].append(ln)
    if sorted(new_cells) != sorted(cells):
        return None
    out: Dict[int, str] = {}
    for i, lines in new_cells.items():
        out[i] = unmask_magics("\n".join(lines), store)
    return out, _findings_in_cells(res.findings, joined), res


def _findings_in_cells(findings: List[Finding], joined: str) -> List[Finding]:
    """`findings` on the joined text, moved to (cell index, line in the cell)."""
    line_to_cell: Dict[int, Tuple[int, int]] = {}
    current, offset = None, 0
    for ln_no, ln in enumerate(joined.split("\n"), start=1):
        m = _MARKER_RX.match(ln)
        if m:
            current, offset = int(m.group(1)), ln_no
            continue
        if current is not None:
            line_to_cell[ln_no] = (current, ln_no - offset)
    for f in findings:
        cell, inner = line_to_cell.get(f.line, (None, f.line))
        f.cell, f.line, f.new_line = cell, inner, 0
    return list(findings)


def _restore_ending(original: str, new: str) -> str:
    """`new` with the original cell's trailing newlines (all of them: blank last lines are kept)."""
    stripped = original.rstrip("\n")
    return new.rstrip("\n") + original[len(stripped):]


def rewrite_notebook(src, d, config, facts):
    """Migrate the code cells of one .ipynb file (engine handler for notebooks)."""
    from .engine import FileResult, _selection_for, rewrite_source
    from . import discovery

    raw = src.text
    try:
        nb = json.loads(raw)
    except ValueError as e:
        return FileResult(d.path, d.kind, raw, raw, error=f"not a notebook (invalid JSON: {e})")
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        return FileResult(d.path, d.kind, raw, raw, error="not a notebook (no cells list)")
    mod, _ = discovery.module_name_for(d.path)
    select = _selection_for(d.path, d.root, config)

    def rewrite(text: str):
        return rewrite_source(text, path=d.path, module_name=mod, options=config.options, select=select,
                              facts=facts)

    cells = _code_cells(nb)
    new_texts: Dict[int, str] = {}
    findings: List[Finding] = []
    notes: List[Dict[str, Any]] = []
    joined = _rewrite_joined(nb, cells, rewrite) if cells else None
    if joined is not None:
        texts, findings, res = joined
        notes = list(res.launch_notes)
        for i, t in texts.items():
            new_texts[i] = _restore_ending(_cell_text(nb["cells"][i]), t)
    else:
        for i in cells:
            original = _cell_text(nb["cells"][i])
            store: List[str] = []
            res = rewrite(mask_magics(original, store))
            if res.error is not None:
                continue  # a cell that is not Python (or not parseable) is left alone
            new_texts[i] = _restore_ending(original, unmask_magics(res.new_text, store))
            for f in res.findings:
                f.cell, f.new_line = i, 0
                findings.append(f)
            notes.extend(res.launch_notes)
    changed = False
    for i, text in new_texts.items():
        if text != _cell_text(nb["cells"][i]):
            _set_cell_text(nb["cells"][i], text)
            changed = True
    new_raw = dump_like(nb, raw) if changed else raw
    findings.sort(key=lambda f: (f.cell if f.cell is not None else -1, f.line, f.col, f.code))
    return FileResult(d.path, d.kind, raw, new_raw, findings, launch_notes=notes)
