"""Whether a project's own copy of apex's loss scaler / FP16_Optimizer (a vendored `loss_scaler.py`,
`fp16_optimizer.py`, `fp16/fp16.py`) is still imported by a file of the run, after the rewrite.

Such a file only carries report-only findings (A2A146 at its DynamicLossScaler, A2A511 at the scaled
backward of its scaler classes, A2A512 at its FP16_Optimizer class): what to do with it depends on its
callers, which only the whole run knows. After pass 2 (`annotate`, called by the engine on the run's
results, the rewritten texts where a file changed), each of those findings gets one of:
- "still imported by main.py:11, pretrain.py:14: ..." (file:line of each import, relative to the copy's
  import root; an importer that is itself an unused copy says so), or
- "no file of the run imports this module any more: it is unused and can be deleted".
A file counts as a copy only when every open finding of it is one of those codes and lies in a top-level
class or in its `if __name__ == "__main__":` demo (a training script defining its own scaler is not one).
An import of an enclosing package counts as a use when its `__init__.py` files import the copy, and a
package whose `__init__.py` loads modules dynamically (importlib, `__import__`) keeps its copies
("loaded dynamically by ..."), so "unused" is only said when no import can reach the file.
"""
from __future__ import annotations

import ast
import dataclasses
import os
from typing import Dict, List, Optional, Sequence, Tuple

from codemods.records import module_root

from . import discovery
from .fileio import SourceError, read_bytes
from .results import FileResult

CODES = ("A2A146", "A2A511", "A2A512")
DYNAMIC = ("import_module", "__import__")


def annotate(results: Sequence[FileResult]) -> None:
    """Add to each finding of a vendored scaler copy among `results` who still imports it."""
    texts: Dict[str, Optional[str]] = {}

    def text_of(fr: FileResult) -> Optional[str]:
        path = os.path.abspath(fr.path)
        if path not in texts:
            text = fr.new_text if fr.changed else fr.old_text
            if not text:
                try:
                    text = read_bytes(fr.path).decode("utf-8", "replace")
                except SourceError:
                    text = None
            texts[path] = text
        return texts[path]

    python = [fr for fr in results if fr.kind == discovery.PYTHON and fr.error is None]
    copies = [fr for fr in python if any(f.code in CODES and not f.fixed for f in fr.findings)
              and _is_copy(fr, text_of(fr))]
    if not copies:
        return
    users = {os.path.abspath(fr.path): _users(fr, python, text_of) for fr in copies}
    for fr in copies:
        path = os.path.abspath(fr.path)
        found, dynamic = users[path]
        root = module_root(fr.path, discovery.module_name_for(fr.path)[0])
        if dynamic:
            note = (f" This copy may still be loaded dynamically ({_rel(dynamic, root)} imports modules by name): "
                    "check before deleting it")
        elif not found:
            note = " No file of the run imports this module any more: it is unused and can be deleted"
        else:
            named = []
            for user, line in found:
                unused = user in users and not users[user][0] and not users[user][1]
                named.append(f"{_rel(user, root)}:{line}" + (" (itself an unused copy)" if unused else ""))
            if len(named) > 8:
                named = named[:8] + [f"and {len(named) - 8} more"]
            note = (f" Still imported by {', '.join(named)}: it can be deleted once those imports go "
                    "(their files migrated to torch.amp.GradScaler)")
        fr.findings = [dataclasses.replace(f, message=f.message.rstrip(". ") + "." + note)
                       if f.code in CODES and not f.fixed and note not in f.message else f for f in fr.findings]


def _rel(path: str, root: str) -> str:
    return os.path.relpath(path, root) if root else path


def _is_copy(fr: FileResult, text: Optional[str]) -> bool:
    """Every open finding of the file is A2A146 / A2A511 / A2A512 inside a top-level class or the
    `if __name__ == "__main__":` block, and the file defines a class."""
    if not text:
        return False
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return False
    spans: List[Tuple[int, int]] = []
    for node in tree.body:
        main = isinstance(node, ast.If) and "__name__" in ast.dump(node.test) and "__main__" in ast.dump(node.test)
        if isinstance(node, ast.ClassDef) or main:
            spans.append((node.lineno, getattr(node, "end_lineno", node.lineno) or node.lineno))
    if not any(isinstance(n, ast.ClassDef) for n in tree.body):
        return False
    # lines are those of the original text, which a report-only file keeps
    for f in fr.findings:
        if f.fixed or f.ignored:
            continue
        if f.code not in CODES or not any(a <= f.line <= b for a, b in spans):
            return False
    return True


def _users(copy: FileResult, python: Sequence[FileResult], text_of) -> Tuple[List[Tuple[str, int]], str]:
    """([(importer path, line)], the path of an `__init__.py` above the copy that imports by name, or "")."""
    module, is_pkg = discovery.module_name_for(copy.path)
    root = module_root(copy.path, module)
    me = os.path.abspath(copy.path)
    parts = module.split(".")
    # the packages above the copy: their __init__.py runs on any import of the copy
    inits = {os.path.join(root, *parts[:k], "__init__.py") for k in range(1, len(parts))} if root else set()
    dynamic = ""
    for init in sorted(inits):
        fr = next((r for r in python if os.path.abspath(r.path) == init), None)
        text = text_of(fr) if fr is not None else _read(init)
        if text and any(d in text for d in DYNAMIC):
            dynamic = init
            break
    # a package above the copy counts when importing it runs the copy: each __init__.py from there down
    # names the next module (`from .loss_scaler import *`)
    names_next = []
    for k in range(1, len(parts)):
        init = os.path.join(root, *parts[:k], "__init__.py") if root else ""
        fr = next((r for r in python if os.path.abspath(r.path) == init), None)
        text = (text_of(fr) if fr is not None else _read(init)) if init else None
        names_next.append(bool(text) and parts[k] in text)
    reach = [all(names_next[k - 1:]) for k in range(1, len(parts))]  # reach[k-1]: importing parts[:k] runs it
    found: List[Tuple[str, int]] = []
    for fr in python:
        path = os.path.abspath(fr.path)
        if path == me or path in inits or (root and os.path.commonpath([root, path]) != root):
            continue
        text = text_of(fr)
        if not text or parts[-1] not in text and parts[0] not in text:
            continue
        for line in _imports_of(fr.path, text, parts, reach):
            found.append((path, line))
    return sorted(set(found)), dynamic


def _read(path: str) -> Optional[str]:
    try:
        return read_bytes(path).decode("utf-8", "replace")
    except (SourceError, OSError):
        return None


def _imports_of(path: str, text: str, parts: List[str], reach: List[bool]) -> List[int]:
    """The lines of `text` whose import may load the module `parts`: itself, a submodule of it, or a
    package above it whose `__init__.py` files import it (`reach[k - 1]` for the package `parts[:k]`)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    mine, is_pkg = discovery.module_name_for(path)
    here = mine.split(".") if mine else []
    package = here if is_pkg else here[:-1]
    target = ".".join(parts)
    lines: List[int] = []

    def reaches(name: str) -> bool:
        if name == target or name.startswith(target + "."):
            return True
        k = name.count(".") + 1
        return target.startswith(name + ".") and reach[k - 1]

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            if any(reaches(a.name) for a in node.names):
                lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1] if node.level - 1 <= len(package) else None
                if base is None:
                    continue
                spec = ".".join(base + ([node.module] if node.module else []))
            else:
                spec = node.module or ""
            if not spec and not node.level:
                continue
            if (spec and reaches(spec)) or any(f"{spec}.{a.name}".lstrip(".") == target for a in node.names):
                lines.append(node.lineno)
    return lines
