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
from .cache_keys import FinalTexts
from .results import FileResult
from .settings import RunConfig
from .source_rewrite import selection_for

APEX_AMP = re.compile(r"\bamp\.(initialize|scale_loss)\b")
NATIVE = re.compile(r"\b(autocast|GradScaler)\b")


def _parse(text: Optional[str]) -> Optional[ast.AST]:
    try:
        return ast.parse(text) if text is not None else None
    except (SyntaxError, ValueError):
        return None


def _imports(tree: Optional[ast.AST], name: str, is_init: bool) -> Tuple[str, ...]:
    """The modules a file with this tree may load, its packages included (sorted)."""
    names = imported_modules(tree, name, is_init) if tree else set()
    for n in list(names):  # a submodule import loads its packages
        parts = n.split(".")
        names.update(".".join(parts[:i]) for i in range(1, len(parts)))
    return tuple(sorted(names))


def _casts(text: Optional[str], tree: Optional[ast.AST], apex_here: bool) -> Optional[List[Tuple[int, int, str]]]:
    """The fp16 casts of a file in scope with this text and tree; None when it is not scanned
    (unparsable, uses autocast or GradScaler, or, `apex_here`, its text uses apex amp)."""
    if tree is None or text is None or NATIVE.search(text) or (apex_here and APEX_AMP.search(text)):
        return None
    return fp16_casts(tree)


def report(results: List[FileResult], config: RunConfig, texts: Optional[FinalTexts] = None) -> None:
    """Add A2A607 findings to the files of `results` in scope (see the module docstring). `texts`: the
    run's files, their bytes and its result cache (per-file answers are kept there for the next run)."""
    if not config.select(CODE):
        return
    texts = texts or FinalTexts()
    python = [(i, fr) for i, fr in enumerate(results) if fr.kind == discovery.PYTHON and fr.error is None]
    migrated = [fr for _, fr in python if fr.changed and APEX_AMP.search(fr.old_text) and NATIVE.search(fr.new_text)]
    if not migrated:
        return
    # module graph of each import root
    by_key: Dict[Tuple[str, str], FileResult] = {}
    key_of: Dict[int, Tuple[str, str]] = {}
    roots: Dict[Tuple[str, int, bool], str] = {}  # module_root of the files of one folder and depth
    for i, fr in python:
        path = os.path.abspath(fr.path)
        name, _ = discovery.module_name_for(path)
        where = (os.path.dirname(path), name.count(".") + (os.path.basename(path) == "__init__.py"), bool(name))
        root = roots.get(where)
        if root is None:
            root = roots[where] = module_root(fr.path, name)
        key = (root, name)
        by_key.setdefault(key, fr)
        key_of[id(fr)] = key
        real = texts.real_path(i, fr)  # a package reached through a symlink (`src -> xlm`) is imported by both names
        if real != path:
            rname, _ = discovery.module_name_for(real)
            by_key.setdefault((module_root(real, rname), rname), fr)
    trees: Dict[int, Optional[ast.AST]] = {}  # parsed by this run (the answers not in the cache)

    def tree_of(i: int, text: Optional[str]) -> Optional[ast.AST]:
        if i not in trees:
            trees[i] = _parse(text)
        return trees[i]

    edges: Dict[int, Set[int]] = {}
    for i, fr in python:
        root, name = key_of[id(fr)]
        is_init = os.path.basename(fr.path) == "__init__.py"
        names = texts.answer(i, fr, "half_imports",
                             lambda text, i=i, name=name, is_init=is_init: _imports(tree_of(i, text), name, is_init))
        edges[id(fr)] = {id(by_key[(root, n)]) for n in names if (root, n) in by_key} - {id(fr)}
    closures: Dict[int, Set[int]] = {}
    for _, fr in python:
        seen, todo = {id(fr)}, [id(fr)]
        while todo:
            for nxt in edges.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        closures[id(fr)] = seen
    targets = {id(fr) for fr in migrated}
    scope: Set[int] = set()
    for _, fr in python:
        if closures[id(fr)] & targets:
            scope |= closures[id(fr)]
    position = {id(fr): i for i, fr in python}
    for fr in sorted((fr for _, fr in python if id(fr) in scope), key=lambda fr: fr.path):
        i = position[id(fr)]
        if fr.old_text and APEX_AMP.search(fr.old_text):
            continue  # what the amp codemod wrote there is its own
        apex_here = not fr.old_text  # else the old text was looked at just above
        casts = texts.answer(i, fr, "half_casts" if apex_here else "half_casts_new",
                             lambda text, i=i, here=apex_here: _casts(text, tree_of(i, text), here))
        if not casts:
            continue
        select = selection_for(fr.path, os.getcwd(), config)
        if not select(CODE):
            continue
        text = texts.text(i, fr) or ""
        where = _migrated_names(fr, [m for m in migrated if key_of[id(m)][0] == key_of[id(fr)][0]] or migrated)
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
