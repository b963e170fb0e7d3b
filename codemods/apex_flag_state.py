"""The scaler's state saved or restored under an apex availability flag that stays (A2A173).

`try: from apex import amp; import amp_C; APEX_FOUND = True except ImportError: APEX_FOUND = False` keeps
its flag after the migration (the `try` still imports apex's extension `amp_C`, so the flag still says
"apex is installed", codemods/guards.py). `if APEX_FOUND: state["amp"] = amp.state_dict()` would then
save the scaler only where apex is installed: a run without apex loses the loss scale on resume.
"""
from __future__ import annotations

from typing import Optional, Set, Tuple

import libcst as cst

from .guards import apex_flag_tries, imports_from_apex
from .names import dotted_name, names_read
from .try_imports import extension_imports


def _kept_availability_flags(module: cst.Module, table) -> Set[str]:
    """Names set True in a `try` beside an import of apex (or of one of its extensions) that the
    import removal does not fold (the `try` imports something else too)."""
    from .index import ModuleIndex
    found: Set[str] = set()
    for t in ModuleIndex.of(module).tries:
        if not any((dotted_name(h.type) or "") in ("ImportError", "ModuleNotFoundError", "Exception")
                   for h in t.handlers if h.type is not None):
            continue
        body = t.body.body if isinstance(t.body, cst.IndentedBlock) else ()
        smalls = [x for s in body if isinstance(s, cst.SimpleStatementLine) for x in s.body]
        if not any(isinstance(x, (cst.Import, cst.ImportFrom)) and (imports_from_apex(x) or extension_imports(x))
                   for x in smalls):
            continue
        for x in smalls:
            if isinstance(x, cst.Assign) and isinstance(x.value, cst.Name) and x.value.value == "True":
                found.update(d for d in (dotted_name(a.target) for a in x.targets) if d and "." not in d)
    return found - set(apex_flag_tries(module, table))


def flag_guard(analysis, call: cst.CSTNode) -> Optional[Tuple[cst.If, str]]:
    """The `if` around `call` whose test reads an apex availability flag that stays, with the flag."""
    flags = _kept_availability_flags(analysis.module, analysis.table)
    if not flags:
        return None
    for a in analysis.index.ancestors(call):
        if isinstance(a, cst.If):
            read = names_read(a.test) & flags
            if read:
                return a, sorted(read)[0]
        if isinstance(a, (cst.FunctionDef, cst.ClassDef)):
            break
    return None
