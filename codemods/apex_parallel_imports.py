"""apex.parallel names spelled out rather than called: the `from apex.parallel import X as N` imports
replaced by torch's (the user's alias kept), and dotted references (`apex.parallel.SyncBatchNorm` in
an isinstance, `ReduceOp.SUM`) rewritten to torch's class. ReduceOp migrates only this way (A2A222)."""
from __future__ import annotations

from typing import Dict, List, Set, Tuple

import libcst as cst

from . import try_imports
from .ancestors import statement_of
from .apex_parallel_names import CLASS_MAP, DDP_NAMES, Refs, edit_code
from .apex_parallel_reported import REPORT_ONLY, RULES_MSG
from .arg_edits import SPACE_COMMA
from .base import FIX, FileContext, rule
from .edits import EditPlan
from .names import ImportTable, dotted_name, parse_expr

rule("A2A222", "apex-reduceop", "apex.parallel.ReduceOp -> torch.distributed.ReduceOp",
     fixes=True, severity=FIX,
     why="apex.parallel re-exported torch.distributed.ReduceOp; use torch's directly.",
     before="from apex.parallel import ReduceOp",
     after="from torch.distributed import ReduceOp")


def replaceable_names(table: ImportTable, ctx: FileContext) -> Tuple[Dict[str, Tuple[str, str, str]], Set[str]]:
    """Which local names (bound by `from apex.parallel import X as N`) may have their import replaced:
    local -> (apex qualified, torch module, torch name); and the names bound to apex's and to another
    class by different imports (reported, left alone)."""
    replace_names: Dict[str, Tuple[str, str, str]] = {}  # local -> (apex qualified, torch module, torch name)
    blocked: Set[str] = set()
    for local, qs in table.bindings.items():
        apex_qs = [q for q in qs if q in CLASS_MAP]
        if not apex_qs:
            continue
        if len(qs) != len(apex_qs) or len({CLASS_MAP[q] for q in apex_qs}) != 1:
            blocked.add(local)
            for stmt in table.statements.get(local, [])[:1]:
                ctx.report(stmt, "A2A202", f"`{local}` is bound to apex's and to another class by different "
                           "imports; migrate its uses by hand (keep only torch's import)")
            continue
        if any(isinstance(s, cst.Import) for s in table.statements.get(local, [])):
            continue  # `import apex.parallel.X as N` is rare; leave it to attribute handling
        if not ctx.enabled(edit_code(apex_qs[0])):
            continue  # a deselected rule's name keeps apex's import
        replace_names[local] = (apex_qs[0],) + CLASS_MAP[apex_qs[0]]
    return replace_names, blocked


def rewrite_dotted(refs: Refs, replace_names: Dict[str, Tuple[str, str, str]], toggled: bool, plan: EditPlan,
                   ctx: FileContext) -> bool:
    """Non-call dotted references: apex.parallel.SyncBatchNorm in isinstance(...), ReduceOp.SUM, ...
    Whether one became torch's (the module then needs `import torch`)."""
    need_torch = False
    for attr, q in refs.attr_refs:
        if any(attr is c.func for c, _ in refs.calls) or attr in plan.replace_node:
            continue  # a call, or a reference already rewritten (LARC: codemods/apex_larc.py)
        head = dotted_name(attr)
        if head and head.split(".")[0] in replace_names:
            continue  # the import itself is replaced; `ReduceOp.MAX` keeps working
        if toggled and any(q == d or q.startswith(d + ".") for d in DDP_NAMES):
            continue  # apex DDP stays in a module that toggles its all-reduce (A2A203)
        for mapped, (tmod, tname) in CLASS_MAP.items():
            if q == mapped or q.startswith(mapped + "."):
                rest = q[len(mapped):]
                if ctx.suppressed(attr, "A2A2") or not ctx.enabled(edit_code(q)):
                    break
                plan.replace_node[attr] = parse_expr(f"{tmod}.{tname}{rest}")
                need_torch = True
                if q.startswith("apex.parallel.ReduceOp"):
                    ctx.report(attr, "A2A222", "apex.parallel.ReduceOp -> torch.distributed.ReduceOp", fixed=True)
                break
        else:
            if q in REPORT_ONLY or q.startswith("apex.parallel.multiproc"):
                code = REPORT_ONLY.get(q, "A2A223")
                ctx.report(attr, code, RULES_MSG[code])
    return need_torch


def replace_imports(table: ImportTable, parents, replace_names: Dict[str, Tuple[str, str, str]], plan: EditPlan,
                    ctx: FileContext) -> None:
    """The import statements binding replaceable names, split into torch's imports (+ the rest)."""
    by_stmt: Dict[int, Tuple[cst.ImportFrom, List[str]]] = {}
    for local in replace_names:
        for stmt in table.statements.get(local, []):
            if isinstance(stmt, cst.ImportFrom):
                by_stmt.setdefault(id(stmt), (stmt, []))[1].append(local)
    for stmt, locals_ in by_stmt.values():
        line = statement_of(stmt, parents)
        if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
            continue
        new_lines = split_import(line, stmt, locals_, replace_names)
        hoist = try_imports.hoist_target(line, parents, locals_)
        if hoist is not None:  # torch's names bound before the `try` whose extension import fails without apex
            torch_lines = [ln for ln in new_lines if isinstance(ln, cst.SimpleStatementLine) and any(
                isinstance(x, cst.ImportFrom) and (dotted_name(x.module) or "").startswith("torch")
                for x in ln.body)]
            new_lines = [ln for ln in new_lines if ln not in torch_lines]
            plan.insert_before(hoist, [ln.with_changes(leading_lines=[]) for ln in torch_lines])
        plan.replace_stmt[line] = new_lines
        for local in locals_:
            q = replace_names[local][0]
            if q.endswith("ReduceOp"):
                ctx.report(stmt, "A2A222", "apex.parallel.ReduceOp -> torch.distributed.ReduceOp", fixed=True)


def split_import(line: cst.SimpleStatementLine, stmt: cst.ImportFrom, locals_: List[str],
                 replace_names: Dict[str, Tuple[str, str, str]]) -> List[cst.BaseStatement]:
    """`from apex.parallel import A as X, B` -> torch import(s) for the replaced names (+ the rest)."""
    assert not isinstance(stmt.names, cst.ImportStar)
    keep: List[cst.ImportAlias] = []
    by_mod: Dict[str, List[cst.ImportAlias]] = {}
    for alias in stmt.names:
        local = alias.asname.name.value if alias.asname is not None else dotted_name(alias.name)  # type: ignore
        if local in locals_:
            _, tmod, tname = replace_names[local]
            asname = alias.asname if alias.asname is not None and local != tname else None
            if asname is None and local != tname:
                asname = cst.AsName(name=cst.Name(local))
            by_mod.setdefault(tmod, []).append(cst.ImportAlias(name=cst.Name(tname), asname=asname))
        else:
            keep.append(alias)
    out: List[cst.BaseStatement] = []
    if keep:
        keep[-1] = keep[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        lpar, rpar = stmt.lpar, stmt.rpar
        out.append(line.with_changes(body=[stmt.with_changes(names=keep, lpar=lpar, rpar=rpar)]))
    for tmod, aliases in by_mod.items():
        fixed = [a.with_changes(comma=SPACE_COMMA) for a in aliases[:-1]] + [aliases[-1]]
        new_stmt = cst.ImportFrom(module=parse_expr(tmod), names=fixed)  # type: ignore[arg-type]
        if not out:
            out.append(line.with_changes(body=[new_stmt]))
        else:
            out.append(cst.SimpleStatementLine(body=[new_stmt],
                                               trailing_whitespace=cst.TrailingWhitespace()))
    return out
