"""A checkpoint's amp state save and its restores migrate together, or neither does.

Part of the amp migration (`codemods/amp.py` calls in here). Besides the direct calls
(`amp.state_dict()`, `amp.load_state_dict(ckpt["amp"])`, which `plan_others` rewrites), the apex amp
module may reach a checkpoint helper as a value: `restart_from_checkpoint(path, ..., amp=apex.amp)`,
where the helper, in this module or another of the run, calls `.load_state_dict` on it
(`codemods/restore_helpers.py` proves which helpers only checkpoint a value). Such an argument becomes
the scaler, under the same keyword so that the checkpoint key still matches the save (A2A135). An
argument that cannot be proven keeps the whole module's amp code as it is, the save included, and
both sites are reported (A2A136, A2A137); so does a restore that is suppressed while its save is not.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import libcst as cst

from . import amp_rules as R
from . import checkpoint_rules as C
from . import templates
from .base import module_root
from .records import same_file
from .restore_helpers import argument_spec, helpers_for_modules, restore_helpers

AMP = "apex.amp"
STATE_KINDS = ("state_dict", "load_state_dict")
# a finding message that tells the engine the helper may be in a file the run has not read for facts
WAITING = "is not in the files read for this run"


def plan_pairs(a: Any) -> bool:
    """After `plan_others`: keep the module's amp state sites together and plan the amp module passed
    as a value. False: the module's amp code is left as it is (aborted here, with the findings)."""
    if _split_pair(a):
        a._abort_all()
        return False
    return plan_amp_values(a)


def _split_pair(a: Any) -> bool:
    """Whether some amp state site of the module is held back (suppressed, or a bf16 restore inside an
    expression, which cannot be removed) while another would migrate; then each is reported."""
    sites = [s for s in a.sites if s.kind in STATE_KINDS and not a.in_dropped(s.call)]
    code = R.STATE_DICT.code
    if not sites or not a.ctx.enabled(code):
        return False
    held = [s for s in sites if a.ctx.suppressed(s.call, code)]
    if not a.use_scaler:
        held += [s for s in sites if s.kind == "load_state_dict" and not (
            isinstance(s.stmt, cst.SimpleStatementLine) and len(s.stmt.body) == 1)]
    if not held or len(held) == len(sites):
        return False
    for s in sites:
        a.report(s.call, C.PAIR_KEPT, f"`amp.{s.kind}` left as it is: the amp state's save and restores migrate "
                                      "together, and one of them is held back (suppressed, or a restore "
                                      "inside an expression), so this module's amp code stays; migrate them "
                                      "together by hand")
    return True


def plan_amp_values(a: Any) -> bool:
    """Plan the apex amp module passed as a call argument (False: refused and aborted)."""
    args = _amp_arguments(a)
    if not args:
        return True
    local = _local_helpers(a)
    planned: List[Tuple[cst.Call, cst.Arg, Dict[str, Any]]] = []
    for call, arg, position in args:
        found, spec = _helper_of(a, call, local)
        use = argument_spec(spec, arg.keyword.value if arg.keyword else None, position) if spec else None
        callee = _code(call.func)
        if use is None or not a.use_scaler:
            if not a.use_scaler and use is not None:
                why = "bf16 has no scaler state to hand to it: drop the argument by hand"
                code = C.PAIR_KEPT
            elif not found:
                why = f"`{callee}` {WAITING}, so what it does with amp is unknown: add its file to the run"
                code = C.PAIR_KEPT
            else:
                why = (f"`{callee}` uses it for more than `state_dict()`/`load_state_dict(sd)` (or "
                       "takes it where that cannot be told), which a GradScaler may not support")
                code = C.AMP_VALUE_KEPT
            _refuse(a, arg, code, f"the apex amp module is passed to `{callee}`: {why}; this module's amp "
                                  "code (its checkpoint save too) is left as it is", waiting=not found)
            return False
        planned.append((call, arg, use))
    sc = a.scaler_expr()
    for call, arg, use in planned:
        a.plan.replace_node[arg.value] = templates.expression(sc)
        a.user_funcs.add(a.func_of(call))
        kw = arg.keyword.value if arg.keyword else None
        shown = f"{kw}={sc}" if kw else sc
        a.report(arg, C.AMP_TO_RESTORE_HELPER, f"apex amp handed to checkpoint helper `{_code(call.func)}`"
                                              f" -> `{shown}` (a GradScaler has `state_dict`/`load_state_dict`; "
                                              "the checkpoint key stays)", fixed=True)
        if use.get("restores"):
            a.report(call, R.OLD_CHECKPOINT, "this restore may receive apex-format amp state (`loss_scaler0`) from "
                                             "old checkpoints, which GradScaler rejects: convert them with "
                                             "`apex2amp convert-checkpoint` (or convert at load time)")
    return True


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def _refuse(a: Any, node: cst.CSTNode, code: Any, msg: str, waiting: bool) -> None:
    a.report(node, code, msg)
    for s in a.sites:
        if s.kind in STATE_KINDS and not a.in_dropped(s.call):
            a.report(s.call, C.PAIR_KEPT, f"`amp.{s.kind}` left as it is: a restore of this module's amp state "
                                          "could not be migrated (see the finding at the amp argument)")
    # a helper in a file not yet read: the engine reads the imported files and runs this file again
    a._abort_all(publish=not waiting)


def _amp_arguments(a: Any) -> List[Tuple[cst.Call, cst.Arg, int]]:
    """(call, argument, positional index) of each call argument that is the apex amp module itself."""
    out: List[Tuple[cst.Call, cst.Arg, int]] = []
    for call in a.index.calls:
        pos = 0
        for arg in call.args:
            if arg.star:
                pos = -10_000
                continue
            if AMP in a.table.qualified_names(arg.value) and not a.in_dropped(call):
                out.append((call, arg, pos if arg.keyword is None and pos >= 0 else -1))
            if arg.keyword is None:
                pos += 1
    return out


def _local_helpers(a: Any) -> Dict[str, Dict[str, Any]]:
    """The checkpoint helpers defined at this module's top level."""
    funcs = [s for s in a.module.body if isinstance(s, cst.FunctionDef)]
    if not funcs:
        return {}
    code = "\n".join(a.module.code_for_node(f.with_changes(decorators=[], leading_lines=[])) for f in funcs)
    return restore_helpers(code.encode("utf-8"))


def _helper_of(a: Any, call: cst.Call, local: Dict[str, Dict[str, Any]]) -> Tuple[bool, Optional[Dict[str, Any]]]:
    """(whether the callee was found in the run, its checkpoint-helper spec or None)."""
    f = call.func
    quals = a.table.qualified_names(f)
    if isinstance(f, cst.Name) and not quals:
        defined = any(isinstance(s, cst.FunctionDef) and s.name.value == f.value for s in a.module.body)
        return defined, local.get(f.value)
    if not quals:
        return False, None
    mine = module_root(a.ctx.path, a.ctx.module_name)
    best: Optional[Tuple[bool, Dict[str, Any]]] = None
    known_module = False
    for key, funcs in helpers_for_modules(a.ctx.facts, sorted({q.rpartition(".")[0] for q in quals}), mine).items():
        root, _, mod = key.rpartition("::")
        for q in quals:
            here = same_file(key, q.rpartition(".")[0], mine)  # the very file, through a namespace package
            if q.rpartition(".")[0] == mod or here:
                known_module = True
                fn = q.rpartition(".")[2]
                if fn in funcs and (best is None or ((root == mine or here) and not best[0])):
                    best = (root == mine or here, funcs[fn])
    if best is not None:
        return True, best[1]
    return known_module, None
