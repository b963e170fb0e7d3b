"""apex.parallel DistributedDataParallel / SyncBatchNorm -> torch.nn.parallel / torch.nn.SyncBatchNorm.

Names are resolved through imports: a `DDP` bound to torch's class is never touched. A name bound by
`from apex.parallel import X as Y` keeps the user's alias: the import itself is replaced
(`from torch.nn.parallel import DistributedDataParallel as DDP`). Calls whose arguments cannot be
mapped (gradient_average=False, **kwargs, odd positionals) are left alone and reported.

The codemod finds the names (codemods/apex_parallel_names.py) and hands each call to its rewrite:
DDP (apex_ddp.py), SyncBatchNorm and its helpers (apex_syncbn.py), names with no twin
(apex_parallel_reported.py); imports and dotted references are replaced in apex_parallel_imports.py.
"""
from __future__ import annotations

from typing import Dict, List, Tuple

import libcst as cst

from .apex_ddp import DDP_TORCH, ddp_call
from .apex_larc import HELPER_CODE as LARC_CODE, LARC_CLASS, LARC_MODULE, REFUSED as LARC_REFUSED, LarcPlan
from .apex_parallel_imports import replace_imports, replaceable_names, rewrite_dotted
from .apex_parallel_names import CONVERT_NAMES, DDP_NAMES, GROUP_NAMES, SYNCBN_NAMES, Refs, edit_code
from .apex_parallel_reported import REPORT_ONLY, RULES_MSG
from .apex_syncbn import HELPER_CODE, HELPER_NAME, convert_call, group_call, syncbn_call
from .base import Codemod, FileContext
from .edits import EditPlan, apply_plan
from .importing import add_helper_function, ensure_imports
from .index import ModuleIndex, parent_mapping, positions_of
from .names import ImportTable, parse_expr


class ApexParallelToTorchDDP(Codemod):
    """apex.parallel DistributedDataParallel / SyncBatchNorm -> torch.nn.parallel / torch.nn.SyncBatchNorm."""

    NAME = "apex_parallel"
    DESCRIPTION = "apex.parallel DistributedDataParallel / SyncBatchNorm -> torch.nn.parallel / torch.nn.SyncBatchNorm"
    CODES = ("A2A201", "A2A202", "A2A203", "A2A210", "A2A211", "A2A212", "A2A213", "A2A220", "A2A221",
             "A2A222", "A2A223", "A2A225")
    WORDS = (b"apex",)

    def transform(self, wrapper: cst.MetadataWrapper, ctx: FileContext) -> cst.Module:
        module = wrapper.module
        table = ImportTable.of(module, ctx.module_name)
        if not any(q.startswith("apex.parallel") or q == "apex"
                   for qs in table.bindings.values() for q in qs) and "apex.parallel" not in table.star_modules:
            return module
        parents = parent_mapping(module)
        positions = positions_of(module)
        refs = Refs.of(table, ModuleIndex.of(module))
        plan = EditPlan()
        need_torch = False
        add_helper = False
        for mod in table.star_modules:
            if mod.startswith("apex.parallel"):
                for stmt in table.star_modules[mod]:
                    ctx.report(stmt, "A2A202", "`from apex.parallel import *`: import the names you use from "
                               "torch.nn.parallel / torch.nn / torch.distributed instead")

        # which local names (bound by `from apex.parallel import X as N`) may have their import replaced
        name_calls: Dict[str, List[Tuple[cst.Call, str]]] = {}
        for call, q in refs.calls:
            if isinstance(call.func, cst.Name):
                name_calls.setdefault(call.func.value, []).append((call, q))
        replace_names, blocked = replaceable_names(table, ctx)
        larc = LarcPlan(module, table, parents, refs, ctx)
        larc_ok = larc.why is None and ctx.enabled("A2A225")
        if larc_ok:
            larc.apply(table, parents, plan, ctx)

        # a module that toggles apex DDP's all-reduce keeps apex DDP: torch DDP has no such methods, and the
        # pattern (no_sync() around the micro-step backward passes) is for a person to rewrite
        toggled = bool(refs.toggles) and any(q in DDP_NAMES for _, q in refs.calls)
        def keep_apex_import(call: cst.Call) -> None:
            """This call stays apex's, so the import of the name it calls stays too."""
            if isinstance(call.func, cst.Name):
                replace_names.pop(call.func.value, None)

        # calls
        for call, q in refs.calls:
            if isinstance(call.func, cst.Name) and call.func.value in blocked:
                continue
            if ctx.suppressed(call, "A2A2") or not ctx.enabled(edit_code(q)):
                keep_apex_import(call)
                continue
            if q in DDP_NAMES and toggled:
                ctx.report(call, "A2A203", "apex DDP kept: this module calls its disable_allreduce()/"
                           "enable_allreduce(), which torch DDP does not have; rewrite those as `with "
                           "model.no_sync():` around the micro-step backward passes, then run apex2amp again")
                keep_apex_import(call)
                continue
            if q in DDP_NAMES:
                new = ddp_call(call, module, parents, positions, table, ctx)
                if new is None:
                    keep_apex_import(call)
                    continue
                if isinstance(call.func, cst.Attribute):
                    new = new.with_changes(func=parse_expr(DDP_TORCH))
                    need_torch = True
                plan.replace_node[call] = new
            elif q in SYNCBN_NAMES:
                new = syncbn_call(call, ctx)
                if new is None:
                    keep_apex_import(call)
                    continue
                if isinstance(call.func, cst.Attribute):
                    need_torch = True
                plan.replace_node[call] = new
            elif q in CONVERT_NAMES:
                new = convert_call(call, ctx)
                if new is None:
                    continue
                need_torch = True
                plan.replace_node[call] = new
            elif q in GROUP_NAMES:
                plan.replace_node[call] = group_call(call, ctx)
                add_helper = need_torch = True
            elif q in (LARC_CLASS, LARC_MODULE):
                if not larc_ok:
                    ctx.report(call, "A2A220", LARC_REFUSED.format(why=larc.why) if larc.why else RULES_MSG["A2A220"])
            elif q in REPORT_ONLY:
                code = REPORT_ONLY[q]
                ctx.report(call, code, RULES_MSG[code])

        if rewrite_dotted(refs, replace_names, toggled, plan, ctx):
            need_torch = True
        replace_imports(table, parents, replace_names, plan, ctx)
        # report-only imports (LARC, Reducer, multiproc) bound by name
        for local, qs in table.bindings.items():
            for q in qs:
                if q in (LARC_CLASS, LARC_MODULE) and larc_ok:
                    continue
                if q in REPORT_ONLY and not name_calls.get(local):
                    for stmt in table.statements.get(local, [])[:1]:
                        ctx.report(stmt, REPORT_ONLY[q], RULES_MSG[REPORT_ONLY[q]])
        if toggled:
            for call in refs.toggles:
                ctx.report(call, "A2A203", "torch DDP has no disable_allreduce/enable_allreduce: wrap the "
                           "micro-step backward passes in `with model.no_sync():`")
        if not plan:
            return module
        new_module = apply_plan(module, plan)
        if add_helper:
            new_module = add_helper_function(new_module, HELPER_NAME, HELPER_CODE.format(name=HELPER_NAME))
        if larc_ok:
            new_module = add_helper_function(new_module, "LARC", LARC_CODE)
            need_torch = True
        if need_torch:
            new_module = ensure_imports(new_module, ["torch"])
        return new_module
