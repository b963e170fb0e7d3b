"""Torch imports that replace apex's inside a `try` that also imports one of apex's compiled extensions.

`try: import amp_C; from apex.parallel import DistributedDataParallel as DDP ... except ImportError: ...`:
`amp_C` (like `apex_C`, `fused_layer_norm_cuda`, ...) comes only with apex and has no torch equivalent, so
its import stays. A torch import written in place of apex's after it would never run without apex, and
the now plain-PyTorch code that reads its name fails with NameError. Such torch imports go right before
the `try` instead, and the extension import gets a finding (A2A172).
"""
from __future__ import annotations

from typing import Dict, List, Optional

import libcst as cst

from .apex_extension_names import APEX_EXTENSIONS
from .names import dotted_name, import_bound_names


def extension_imports(stmt: cst.CSTNode) -> List[str]:
    """The apex extension modules an Import / ImportFrom statement imports (from)."""
    if isinstance(stmt, cst.Import):
        names = [dotted_name(a.name) or "" for a in stmt.names]
    elif isinstance(stmt, cst.ImportFrom) and not stmt.relative and stmt.module is not None:
        names = [dotted_name(stmt.module) or ""]
    else:
        return []
    return [n for n in names if n.split(".")[0] in APEX_EXTENSIONS]


def _imports_extension(line: cst.BaseStatement) -> bool:
    return isinstance(line, cst.SimpleStatementLine) and any(
        isinstance(s, (cst.Import, cst.ImportFrom)) and extension_imports(s) for s in line.body)


def _handler_binds(t: cst.Try, names: List[str]) -> bool:
    """Whether an except/else/finally block of `t` binds one of `names` (a fallback such as `DDP = None`)."""
    for block in [h.body for h in t.handlers] + [b.body for b in (t.orelse, t.finalbody) if b is not None]:
        for s in block.body if isinstance(block, cst.IndentedBlock) else ():
            for small in s.body if isinstance(s, cst.SimpleStatementLine) else ():
                if isinstance(small, cst.Assign) and any(dotted_name(x.target) in names for x in small.targets):
                    return True
                if isinstance(small, (cst.Import, cst.ImportFrom)) and import_bound_names(small) & set(names):
                    return True
            if not isinstance(s, cst.SimpleStatementLine):
                return True  # a compound statement: may bind anything
    return False


def hoist_target(line: cst.SimpleStatementLine, parents: Dict, bound: List[str]) -> Optional[cst.Try]:
    """The `try` whose body holds `line` after an apex extension import: the torch import that replaces
    `line` (binding `bound`) must go before that `try`. None when there is no such `try`, or when the
    `try`'s handlers bind those names themselves."""
    block = parents.get(line)
    t = parents.get(block) if isinstance(block, cst.IndentedBlock) else None
    if not isinstance(t, cst.Try) or t.body is not block:
        return None
    earlier = list(block.body)[:list(block.body).index(line)] if line in block.body else []
    if not any(_imports_extension(s) for s in earlier) or _handler_binds(t, bound):
        return None
    return t
