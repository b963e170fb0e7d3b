"""The imports of a file moved to FSDP2: the DDP import the wrap used goes when nothing else reads
it; `fully_shard`, MixedPrecisionPolicy and the checkpoint functions come after the leading torch
imports."""
from __future__ import annotations

from typing import List, Set

import libcst as cst

from .fsdp2_state import DDP_NAMES
from .names import code_of, dotted_name, names_read

def fix_imports(module: cst.Module, needs_dcp: Set[str]) -> cst.Module:
    body = list(module.body)
    # the DDP import the wrap used, when nothing else reads it
    read = names_read(module)
    for i, s in enumerate(body):
        if isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1 and isinstance(s.body[0], cst.ImportFrom) \
                and not isinstance(s.body[0].names, cst.ImportStar) and len(s.body[0].names) == 1:
            alias = s.body[0].names[0]
            local = alias.asname.name.value if alias.asname else dotted_name(alias.name)  # type: ignore[union-attr]
            mod = dotted_name(s.body[0].module) if s.body[0].module else ""
            if f"{mod}.{dotted_name(alias.name)}" in DDP_NAMES and local not in read:
                body[i] = cst.RemovalSentinel.REMOVE  # type: ignore[assignment]
    body = [s for s in body if s is not cst.RemovalSentinel.REMOVE]
    lines = ["from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard"]
    if needs_dcp:
        lines.insert(0, wrapped_import("torch.distributed.checkpoint.state_dict",
                                       sorted(needs_dcp, key=lambda n: (n != "StateDictOptions", n))))
    last = last_torch = -1  # after the leading imports' last torch import (else their last import)
    for i, s in enumerate(body):
        if isinstance(s, cst.SimpleStatementLine) and all(isinstance(b, (cst.Import, cst.ImportFrom)) for b in s.body):
            last = i
            if "torch" in code_of(s).split("import")[0 if isinstance(s.body[0], cst.ImportFrom) else 1]:
                last_torch = i
        elif i > 0 or not (isinstance(s, cst.SimpleStatementLine) and isinstance(s.body[0], cst.Expr)):
            break
    last = last_torch if last_torch >= 0 else last
    new = [cst.parse_statement(l + "\n") for l in lines]
    return module.with_changes(body=[*body[:last + 1], *new, *body[last + 1:]])


def wrapped_import(module: str, names: List[str], width: int = 120) -> str:
    """`from module import a, b`, parenthesized and wrapped under its first name when longer than `width`."""
    line = f"from {module} import {', '.join(names)}"
    if len(line) <= width:
        return line
    head = f"from {module} import ("
    rows, row = [], ""
    for n in names:
        piece = f"{row}, {n}" if row else n
        if row and len(" " * len(head) + piece) + 2 > width:
            rows.append(row + ",")
            row = n
        else:
            row = piece
    rows.append(row + ")")
    return head + ("\n" + " " * len(head)).join(rows)
