"""A2A607 over the whole run: fp16 casts in the files of a migrated program that autocast no longer covers.

Called by the engine after pass 2 on the run's results (`report`). Scope, per import root:
- the migrated files: changed by the run, their old text used apex amp (`amp.initialize` /
  `amp.scale_loss`), their new text uses autocast or GradScaler;
- the entry points: every file of the run whose import closure (imports resolved to files of the
  same import root, packages' `__init__.py` included) reaches a migrated file;
- the scope: the union of the entry points' import closures. apex's patching was process-wide in
  those programs, so a cast anywhere in them ran under it.
A file in scope is scanned when it uses neither autocast nor GradScaler (A2A604 reports every cast in
those) and did not itself use apex amp (what the amp codemod wrote there, an O3 `half_forward`
included, is its own). Files the run reaches only by folder walk, with no import path to a migrated
file, are never reported: they did not run under apex's patching.
"""
from __future__ import annotations

import ast
import os
import re
from typing import Dict, List, Optional, Set, Tuple

from codemods.hazard_half_outside import CODE, fp16_casts, imported_modules
from codemods.base import named_from
from codemods.records import Finding, WARNING, module_root
from codemods.suppression import Suppressions

from . import discovery
from .fileio import SourceError, read_bytes
from .results import FileResult
from .settings import RunConfig
from .source_rewrite import selection_for

APEX_AMP = re.compile(r"\bamp\.(initialize|scale_loss)\b")
NATIVE = re.compile(r"\b(autocast|GradScaler)\b")


def _text(fr: FileResult) -> Optional[str]:
    text = fr.new_text if fr.changed else fr.old_text
    if text:
        return text
    try:
        return read_bytes(fr.path).decode("utf-8", "replace")
    except SourceError:
        return None


def report(results: List[FileResult], config: RunConfig) -> None:
    """Add A2A607 findings to the files of `results` in scope (see the module docstring)."""
    if not config.select(CODE):
        return
    python = [fr for fr in results if fr.kind == discovery.PYTHON and fr.error is None]
    migrated = [fr for fr in python if fr.changed and APEX_AMP.search(fr.old_text) and NATIVE.search(fr.new_text)]
    if not migrated:
        return
    # module graph of each import root
    by_key: Dict[Tuple[str, str], FileResult] = {}
    key_of: Dict[int, Tuple[str, str]] = {}
    trees: Dict[int, Optional[ast.AST]] = {}
    texts: Dict[int, Optional[str]] = {}
    for fr in python:
        name, _ = discovery.module_name_for(fr.path)
        key = (module_root(fr.path, name), name)
        by_key.setdefault(key, fr)
        key_of[id(fr)] = key
        real = os.path.realpath(fr.path)  # a package reached through a symlink (`src -> xlm`) is imported by both names
        if real != os.path.abspath(fr.path):
            rname, _ = discovery.module_name_for(real)
            by_key.setdefault((module_root(real, rname), rname), fr)
    edges: Dict[int, Set[int]] = {}
    for fr in python:
        text = texts[id(fr)] = _text(fr)
        try:
            tree = ast.parse(text) if text is not None else None
        except (SyntaxError, ValueError):
            tree = None
        trees[id(fr)] = tree
        root, name = key_of[id(fr)]
        names = imported_modules(tree, name, os.path.basename(fr.path) == "__init__.py") if tree else set()
        for n in list(names):  # a submodule import loads its packages
            parts = n.split(".")
            names.update(".".join(parts[:i]) for i in range(1, len(parts)))
        edges[id(fr)] = {id(by_key[(root, n)]) for n in names if (root, n) in by_key} - {id(fr)}
    closures: Dict[int, Set[int]] = {}
    for fr in python:
        seen, todo = {id(fr)}, [id(fr)]
        while todo:
            for nxt in edges.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        closures[id(fr)] = seen
    targets = {id(fr) for fr in migrated}
    scope: Set[int] = set()
    for fr in python:
        if closures[id(fr)] & targets:
            scope |= closures[id(fr)]
    names_of = {id(fr): fr for fr in python}
    for i in sorted(scope, key=lambda i: names_of[i].path):
        fr = names_of[i]
        text, tree = texts[i], trees[i]
        if tree is None or text is None or NATIVE.search(text) or APEX_AMP.search(fr.old_text or text):
            continue
        casts = fp16_casts(tree)
        if not casts:
            continue
        select = selection_for(fr.path, os.getcwd(), config)
        if not select(CODE):
            continue
        where = _migrated_names(fr, [m for m in migrated if key_of[id(m)][0] == key_of[i][0]] or migrated)
        sup = Suppressions(text)
        known = {(f.code, f.line, f.col) for f in fr.findings}
        for line, col, what in casts:
            if (CODE, line, col) in known:
                continue
            fr.findings.append(Finding(
                CODE, f"`{what}` outside the autocast regions the migration made ({where}): apex O1 patched "
                "torch process-wide, so fp16 tensors here met fp32 layers without error; now this raises a "
                "dtype mismatch or runs in another precision. Wrap the forward that uses it in "
                "`torch.autocast(\"cuda\", dtype=torch.float16, enabled=...)` with the same enabled= as "
                "training, or drop the cast", line=line, col=col, severity=WARNING,
                new_line=line if not fr.changed else 0, ignored=sup.covers_finding(line, CODE)))


def _migrated_names(fr: FileResult, migrated: List[FileResult]) -> str:
    names = sorted(named_from(m.path, fr.path) for m in migrated)
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
