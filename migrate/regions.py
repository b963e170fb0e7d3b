"""Rewrite a big file through the few statements its codemods need.

Some codemods act on one statement and read nothing else of the module but its top-level imports:
a `--local_rank` argument (launch's A2A408) is the common case, in training scripts thousands of
lines long. When those are the only codemods a file wants (`Codemod.REGION_TOKENS`), the engine
parses with libcst a reduced module instead of the whole one (`reduce`):

- the prologue: every line up to and including the first statement after the leading docstring
  and imports, with the first statement that opens an indented block (so libcst finds the same
  default indent, newline and import position as in the whole file);
- every top-level import, and every top-level `if`/`try`/`with` holding one (an import guard);
- every other top-level statement whose text holds one of the codemods' tokens; of a function or
  class of `_MIN_INNER` lines or more, only its header and the body statements that hold them;

each with the blank and comment lines above it (its leading lines, where suppression comments
sit). The changed lines are put back into the whole text (`splice`); a change that does not fall
inside one kept piece sends the file down the whole-module path, as does anything `ast` cannot
parse.
"""
from __future__ import annotations

import ast
import difflib
import re
from typing import Iterable, List, Optional, Sequence, Tuple

_LINE = re.compile(r"[^\n]*\n|[^\n]+")
_LONE_CR = re.compile(r"\r(?!\n)")
_MIN_LINES = 400  # smaller files are parsed whole: a reduction would save little
_MAX_KEPT = 0.5  # nor is a file reduced that keeps more than this share of its lines
_MIN_INNER = 40  # a function or class this long keeps only its header and the body statements it needs
_BLOCKS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.If, ast.For, ast.AsyncFor, ast.While,
           ast.With, ast.AsyncWith, ast.Try) + ((ast.TryStar,) if hasattr(ast, "TryStar") else ()) + (
           (ast.Match,) if hasattr(ast, "Match") else ())
_GUARDS = (ast.If, ast.Try, ast.With) + ((ast.TryStar,) if hasattr(ast, "TryStar") else ())


class Reduced:
    """A reduced module: its text, and for each of its lines the line of the whole text it is."""

    def __init__(self, lines: List[str], keep: List[Tuple[int, int]]):
        self.whole_lines = lines  # the whole text's lines, with their endings
        self.pieces = keep  # (first, last) 0-based line ranges of the whole text, in order
        self.origin: List[int] = []  # 0-based whole line of each reduced line
        self.piece_of: List[int] = []  # which piece each reduced line comes from
        for k, (a, b) in enumerate(keep):
            self.origin.extend(range(a, b + 1))
            self.piece_of.extend([k] * (b - a + 1))
        self.text = "".join(lines[a] for a in self.origin)

    def whole_line(self, line: int) -> int:
        """The 1-based line of the whole text that 1-based reduced `line` is (0 stays 0)."""
        return self.origin[line - 1] + 1 if 0 < line <= len(self.origin) else line

    def splice(self, new_text: str) -> Optional[str]:
        """The whole text with the changes from `self.text` to `new_text` made to it, or None when a
        change is not inside one piece (it could belong to lines the reduced module left out)."""
        old, new = _LINE.findall(self.text), _LINE.findall(new_text)
        out = list(self.whole_lines)
        edits = []
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
            if tag == "equal":
                continue
            if i1 < i2:
                if self.piece_of[i1] != self.piece_of[i2 - 1]:
                    return None
                edits.append((self.origin[i1], self.origin[i2 - 1] + 1, new[j1:j2]))
            else:  # an insertion before reduced line i1: at the top or inside a piece only
                if i1 >= len(old) or i1 > 0 and self.piece_of[i1 - 1] != self.piece_of[i1]:
                    return None
                edits.append((self.origin[i1], self.origin[i1], new[j1:j2]))
        for a, b, lines in reversed(edits):
            out[a:b] = lines
        return "".join(out)


def reduce(text: str, tokens: Iterable[str]) -> Optional[Reduced]:
    """The reduced module of `text` for codemods that need only the statements holding `tokens`, or
    None when it would not be much smaller or `ast` cannot split the text into statements."""
    if "\r" in text and _LONE_CR.search(text):
        return None  # a line break libcst and ast count but the pieces do not
    lines = _LINE.findall(text)
    if len(lines) < _MIN_LINES:
        return None
    try:
        tree = syntax_tree(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    spans = _statement_spans(tree.body)
    if len(spans) < 2:
        return None
    tokens = tuple(tokens)
    keep: List[Tuple[int, int]] = []
    end = -1  # last line (0-based) of the statement before
    prologue = _prologue_end(tree.body, spans)
    for (first, last, nodes) in spans:
        if last <= prologue or any(isinstance(n, (ast.Import, ast.ImportFrom)) or _holds_import(n) for n in nodes):
            _add(keep, end + 1, last)  # the blank and comment lines above belong to the statement
        elif _holds(lines, first, last, tokens):
            inner = _inner_pieces(nodes[0], first, last, lines, tokens) if len(nodes) == 1 else None
            if inner is None:
                _add(keep, end + 1, last)
            else:
                _add(keep, end + 1, inner[0][1])  # the header
                for a, b in inner[1:]:
                    _add(keep, a, b)
        end = last
    kept = sum(b - a + 1 for a, b in keep)
    if kept > _MAX_KEPT * len(lines):
        return None
    return Reduced(lines, keep)


def _holds(lines: List[str], first: int, last: int, tokens: Sequence[str]) -> bool:
    return any(t in lines[i] for i in range(first, last + 1) for t in tokens)


def _add(keep: List[Tuple[int, int]], first: int, last: int) -> None:
    """Keep lines first..last, as a piece of their own unless they continue the last piece."""
    if keep and keep[-1][1] == first - 1:
        keep[-1] = (keep[-1][0], last)
    else:
        keep.append((first, last))


def _inner_pieces(node: ast.stmt, first: int, last: int, lines: List[str], tokens: Sequence[str]
                  ) -> Optional[List[Tuple[int, int]]]:
    """For a long function or class (lines first..last, decorators included) whose body holds the
    tokens: its header (from the first decorator through the line before its body's leading
    comments), then each body statement that holds a token, with its leading lines. None: keep the
    statement whole (short, a body on the header's line, or the tokens in the header itself)."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return None
    if last - first < _MIN_INNER:
        return None
    body = _statement_spans(node.body)
    header_end = body[0][0] - 1
    while header_end >= node.lineno and lines[header_end].strip()[:1] in ("", "#"):
        header_end -= 1  # blank and comment lines before the body lead its first statement
    if header_end < node.lineno - 1 or _holds(lines, first, header_end, tokens):
        return None
    out = [(first, header_end)]
    end = header_end
    for a, b, _ in body:
        if _holds(lines, a, b, tokens):
            out.append((end + 1, b))
        end = b
    return out if len(out) > 1 else None


_last_tree: List[Optional[Tuple[str, ast.Module]]] = [None]  # the text `syntax_tree` parsed last, with its tree


def syntax_tree(text: str) -> ast.Module:
    """`ast.parse(text)` (raising as it does), kept for the same text object until `forget`: the
    safety gate's parse check of a rewrite and the reduction of its second rewrite read one parse."""
    last = _last_tree[0]
    if last is not None and last[0] is text:
        return last[1]
    _last_tree[0] = None
    tree = ast.parse(text)
    _last_tree[0] = (text, tree)
    return tree


def forget() -> None:
    """Drop the kept tree (a file is done)."""
    _last_tree[0] = None


def _statement_spans(body: Sequence[ast.stmt]) -> List[Tuple[int, int, List[ast.stmt]]]:
    """(first, last) 0-based lines of each top-level statement (decorators included); statements
    sharing a line (`a = 1; b = 2`) make one span."""
    out: List[Tuple[int, int, List[ast.stmt]]] = []
    for node in body:
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", ())]) - 1
        last = (node.end_lineno or node.lineno) - 1
        if out and first <= out[-1][1]:
            out[-1] = (out[-1][0], max(last, out[-1][1]), out[-1][2] + [node])
        else:
            out.append((first, last, [node]))
    return out


def _prologue_end(body: Sequence[ast.stmt], spans: List[Tuple[int, int, List[ast.stmt]]]) -> int:
    """The last line of the prologue: through the first statement after the leading docstrings,
    imports and `__strict__` flags, and through the first statement that opens an indented block."""
    leading = 0
    while leading < len(spans) and all(_leading(n) for n in spans[leading][2]):
        leading += 1
    end = spans[min(leading, len(spans) - 1)][1]
    for first, last, nodes in spans:
        if any(_opens_block(n) for n in nodes):
            return max(end, last)
    return end


def _opens_block(node: ast.stmt) -> bool:
    """Whether a compound statement's body starts on a line of its own (an indented block)."""
    if not isinstance(node, _BLOCKS):
        return False
    cases = getattr(node, "cases", None)  # a match: its `case` lines are the block
    first = cases[0].pattern if cases else node.body[0]
    return first.lineno > node.lineno


def _leading(node: ast.stmt) -> bool:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return True
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
        return True
    return isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__strict__"
                                                for t in node.targets)


def _holds_import(node: ast.stmt) -> bool:
    """Whether a top-level `if`, `try` or `with` holds an import (an import guard)."""
    if not isinstance(node, _GUARDS):
        return False
    return any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(node))
