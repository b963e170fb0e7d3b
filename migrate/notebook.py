"""Jupyter notebooks: code cells are migrated like one module, everything else is kept.

The code cells are joined into one text (with a marker line between cells) so names that cross cells
(`amp` imported in cell 1, used in cell 3) resolve; IPython magics (`%x`, `!cmd`, `x = !cmd`,
`obj?`) are masked as `pass` lines before parsing and restored after, and cells that start with a cell
magic (`%%bash`) are left alone. When some cell does not parse, the cells that do are joined and
rewritten the same way, and each cell that does not is left as it is and reported (A2A118, with the
cell index and the parse error). When that cannot be done safely (the cells do not parse together,
the rewrite moves a cell marker, or it removes a name a cell that does not parse mentions) the
notebook is reported as an error and left unchanged: cells rewritten one by one would lose the names
that cross cells. A cell whose code does not change keeps its exact source, and a changed cell keeps
its trailing blank lines; the file is rewritten only when some cell's code changed. Outputs, metadata,
key order, indentation and the trailing newline of the JSON file are kept; findings carry the cell
index and the line in the cell.
"""
from __future__ import annotations

import functools
import json
import re
from typing import Any, Dict, FrozenSet, List, Optional, Set, Tuple

from codemods.base import WARNING, Finding

# the placeholders must not contain "apex": the byte prefilter would then pass every joined notebook
MARKER = "# a2a-cell-boundary {}"
_MARKER_RX = re.compile(r"^# a2a-cell-boundary (\d+)$")
_MASK = "pass  # a2a-magic {}"
_MASK_RX = re.compile(r"^(\s*)pass  # a2a-magic (\d+)$")
UNPARSABLE_CODE = "A2A118"  # apex-still-used: whatever apex a cell that does not parse uses stays


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


class _JoinFailed(Exception):
    """The joined cells could not be rewritten; the message says why."""


def _rewrite_joined(nb, cells: List[int], rewrite) -> Tuple[Dict[int, str], List[Finding], Any]:
    """Rewrite the code cells `cells` as one module: (new cell texts, findings, result).

    Raises _JoinFailed when the joined text is not rewritten (it does not parse, or the rewrite
    fails) or when the rewrite cannot be split back into the same cells.
    """
    store: List[str] = []
    parts: List[str] = []
    for i in cells:
        parts.append(MARKER.format(i))
        parts.append(mask_magics(_cell_text(nb["cells"][i]), store).rstrip("\n"))
    joined = "\n".join(parts) + "\n"
    res = rewrite(joined)
    if res.error is not None:
        raise _JoinFailed(_error_in_cells(res.error.replace("; file left unchanged", ""), joined))
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
                raise _JoinFailed("internal error: the rewrite put code before the first cell")
            continue
        new_cells[current].append(ln)
    if sorted(new_cells) != sorted(cells):
        raise _JoinFailed("internal error: the rewrite moved a cell boundary")
    used = _magic_uses_lost_name(res, store)
    if used is not None:
        raise _JoinFailed(used)
    out: Dict[int, str] = {}
    for i, lines in new_cells.items():
        out[i] = unmask_magics("\n".join(lines), store)
    return out, _findings_in_cells(res.findings, joined), res


def _magic_uses_lost_name(res, magics: List[str]) -> Optional[str]:
    """Why the rewrite `res` would break a masked magic line: it stops binding a name the line uses
    (`%time model = FusedLayerNorm(16)` after the apex import went)."""
    if not magics:
        return None
    lost = _lost_names(res)
    if lost is None:
        return None
    for line in magics:
        used = lost & _words(line)
        if used:
            return f"the rewrite removes `{min(used)}`, which the magic line `{line.strip()}` uses: migrate that " \
                   "line by hand"
    return None


def _cell_lines(joined: str) -> Dict[int, Tuple[int, int]]:
    """Line of the joined text -> (cell index, line in the cell)."""
    out: Dict[int, Tuple[int, int]] = {}
    current, offset = None, 0
    for ln_no, ln in enumerate(joined.split("\n"), start=1):
        m = _MARKER_RX.match(ln)
        if m:
            current, offset = int(m.group(1)), ln_no
            continue
        if current is not None:
            out[ln_no] = (current, ln_no - offset)
    return out


def _findings_in_cells(findings: List[Finding], joined: str) -> List[Finding]:
    """`findings` on the joined text, moved to (cell index, line in the cell)."""
    line_to_cell = _cell_lines(joined)
    for f in findings:
        cell, inner = line_to_cell.get(f.line, (None, f.line))
        f.cell, f.line, f.new_line = cell, inner, 0
    return list(findings)


def _error_in_cells(error: str, joined: str) -> str:
    """`error` on the joined text with its "line N" told as "cell C, line L"."""
    line_to_cell = _cell_lines(joined)

    def to_cell(m: "re.Match[str]") -> str:
        where = line_to_cell.get(int(m.group(1)))
        return f"cell {where[0]}, line {where[1]}" if where else m.group(0)

    return re.sub(r"\bline (\d+)", to_cell, error, count=1)


def _parse_failure(code: str) -> Optional[Tuple[int, int, str]]:
    """(line, column, reason) when `code` does not parse on its own, else None.

    libcst decides (it parses the rewrite); CPython's parser, when it agrees, says where more precisely.
    """
    import ast
    from .source_rewrite import guard, parse, parse_error
    try:
        parse(code)
    except BaseException as e:  # noqa: B036 - ParserSyntaxError, RecursionError, native panics
        guard(e)
        try:
            ast.parse(code)
        except SyntaxError as why:
            return why.lineno or 0, why.offset or 0, f"syntax error at line {why.lineno}: {why.msg}"
        except (ValueError, RecursionError, MemoryError):
            pass
        return getattr(e, "raw_line", 0), getattr(e, "raw_column", -1) + 1, parse_error(e)
    return None


def _unparsable_cells(nb, cells: List[int]) -> Dict[int, Finding]:
    """A finding for each of `cells` that does not parse on its own (magics masked)."""
    out: Dict[int, Finding] = {}
    for i in cells:
        failure = _parse_failure(mask_magics(_cell_text(nb["cells"][i]), []))
        if failure is not None:
            line, col, reason = failure
            out[i] = Finding(UNPARSABLE_CODE, f"cell does not parse ({reason}): left unchanged, migrate it "
                             "by hand", line, col, WARNING, cell=i)
    return out


@functools.lru_cache(maxsize=4)  # the magic-line and broken-cell checks ask about the same rewrite
def _bound_names(code: str) -> FrozenSet[str]:
    """Every name `code` binds (imports, assignments, defs, classes; at any depth)."""
    import ast
    out: Set[str] = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
    return frozenset(out)


def _lost_names(res) -> Optional[FrozenSet[str]]:
    """The names the rewrite `res` stops binding (None when Python's parser rejects either text)."""
    try:
        return _bound_names(res.old_text) - _bound_names(res.new_text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _words(text: str) -> Set[str]:
    return set(re.findall(r"[A-Za-z_]\w*", text))


def _name_lost(res, nb, broken: List[int]) -> Optional[str]:
    """Why the rewrite `res` may break a cell in `broken` (it stops binding a name the cell mentions)."""
    lost = _lost_names(res)
    if lost is None:
        return "the names the rewrite removes are not known (Python's parser rejects the code)"
    for i in broken:
        used = lost & _words(_cell_text(nb["cells"][i]))
        if used:
            return f"the rewrite removes `{min(used)}`, which cell {i} uses, and that cell does not parse"
    return None


def _restore_ending(original: str, new: str) -> str:
    """`new` with the original cell's trailing newlines (all of them: blank last lines are kept)."""
    stripped = original.rstrip("\n")
    return new.rstrip("\n") + original[len(stripped):]


def _rewrite_parsable(nb, cells: List[int], rewrite, failed: _JoinFailed):
    """After the joined `cells` `failed`: join and rewrite the cells that parse, report the others.

    Returns (new cell texts, findings, result, error); with an error nothing is rewritten.
    """
    broken = _unparsable_cells(nb, cells)
    findings = list(broken.values())
    parsable = [i for i in cells if i not in broken]
    if not broken:  # every cell parses on its own: joining them again fails the same way
        return {}, findings, None, f"{failed} (in the joined code cells); notebook left unchanged"
    if not parsable:
        return {}, findings, None, None
    try:
        texts, more, res = _rewrite_joined(nb, parsable, rewrite)
    except _JoinFailed as again:
        return {}, findings, None, f"{again} (in the joined code cells that parse); notebook left unchanged"
    why = _name_lost(res, nb, list(broken)) if texts else None
    if why is not None:
        return {}, findings, None, f"{why}; notebook left unchanged"
    return texts, findings + more, res, None


def rewrite_notebook(src, d, config, facts):
    """Migrate the code cells of one .ipynb file (engine handler for notebooks)."""
    from .results import FileResult
    from .source_rewrite import rewrite_source, selection_for
    from . import discovery

    raw = src.text
    try:
        nb = json.loads(raw)
    except ValueError as e:
        return FileResult(d.path, d.kind, raw, raw, error=f"not a notebook (invalid JSON: {e})")
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        return FileResult(d.path, d.kind, raw, raw, error="not a notebook (no cells list)")
    mod, _ = discovery.module_name_for(d.path)
    select = selection_for(d.path, d.root, config)

    def rewrite(text: str):
        return rewrite_source(text, path=d.path, module_name=mod, options=config.options, select=select,
                              facts=facts)

    cells = _code_cells(nb)
    error: Optional[str] = None
    try:
        texts, findings, res = _rewrite_joined(nb, cells, rewrite) if cells else ({}, [], None)
    except _JoinFailed as failed:
        texts, findings, res, error = _rewrite_parsable(nb, cells, rewrite, failed)
    notes = list(res.launch_notes) if res is not None else []
    new_texts = {i: _restore_ending(_cell_text(nb["cells"][i]), t) for i, t in texts.items()}
    changed = False
    for i, text in new_texts.items():
        if text != _cell_text(nb["cells"][i]):
            _set_cell_text(nb["cells"][i], text)
            changed = True
    new_raw = dump_like(nb, raw) if changed else raw
    findings.sort(key=lambda f: (f.cell if f.cell is not None else -1, f.line, f.col, f.code))
    return FileResult(d.path, d.kind, raw, new_raw, findings, error, launch_notes=notes)
