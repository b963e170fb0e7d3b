"""apex.parallel.DistributedDataParallel -> torch.nn.parallel.DistributedDataParallel (A2A201):
apex's options mapped or dropped, device_ids from the local rank in scope, broadcast_buffers=False
(apex never broadcast buffers); calls that cannot be mapped (A2A202) and modules toggling apex DDP's
all-reduce (A2A203) are reported."""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import libcst as cst

from .ancestors import enclosing
from .arg_edits import edit_args, is_false, is_true, kwarg
from .base import FIX, WARNING, FileContext, rule
from .device_guards import guarded_by_own_value
from .names import ImportTable, code_of, dotted_name, parse_expr
from .walk import Visitor

DDP_TORCH = "torch.nn.parallel.DistributedDataParallel"

# apex DDP keywords with no torch equivalent whose dropping keeps the result (spec section 3)
DROPPED_DDP_KWARGS = {
    "message_size", "allreduce_always_fp32", "gradient_predivide_factor", "num_allreduce_streams",
    "allreduce_communicators", "retain_allreduce_buffers", "allreduce_trigger_params", "prof",
    "gradient_average_split_factor",
}
LOCAL_RANK_ATTRS = ("local_rank", "gpu", "local_gpu", "gpu_id")

rule("A2A201", "apex-ddp-to-torch-ddp", "apex.parallel.DistributedDataParallel -> torch.nn.parallel.DistributedDataParallel",
     fixes=True, severity=FIX,
     why="""
apex's DistributedDataParallel was removed from apex (25.07). torch's DDP is the replacement. apex DDP had
no device_ids (it relied on a prior torch.cuda.set_device), so device_ids=[<local rank>] is added when a
local-rank expression is known in scope. apex never broadcast buffers (BatchNorm running stats stayed per
rank); torch broadcasts rank 0's buffers on every forward unless broadcast_buffers=False, which is emitted
to keep the old behaviour (remove it if you want torch's default). delay_allreduce=True tolerated unused
parameters; torch needs find_unused_parameters=True for that. message_size, allreduce_always_fp32,
gradient_predivide_factor, num_allreduce_streams and friends have no torch equivalent and are dropped
(the averaged gradient is the same).""",
     before="""
from apex.parallel import DistributedDataParallel as DDP
torch.cuda.set_device(args.local_rank)
model = DDP(model, delay_allreduce=True)""",
     after="""
from torch.nn.parallel import DistributedDataParallel as DDP
torch.cuda.set_device(args.local_rank)
model = DDP(model, device_ids=[args.local_rank], broadcast_buffers=False, find_unused_parameters=True)""")

rule("A2A202", "apex-ddp-manual", "apex DistributedDataParallel call that cannot be mapped automatically",
     fixes=False, severity=WARNING,
     why="""
Some apex DDP calls have no mechanical torch equivalent: gradient_average=False (sum instead of mean:
register a comm hook that sums), shared_param, **kwargs the tool cannot see, extra positional arguments,
or a name bound to apex's DDP in one import and to torch's in another. The call is left as it is.""",
     before="""
from apex.parallel import DistributedDataParallel as DDP


def wrap(model):
    return DDP(model, gradient_average=False)""",
     after="""
model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
model.register_comm_hook(None, sum_allreduce_hook)  # your hook: all_reduce without dividing""")

rule("A2A203", "apex-ddp-allreduce-toggle", "apex DDP disable_allreduce()/enable_allreduce() -> no_sync()",
     fixes=False, severity=WARNING,
     why="""
torch DDP has no disable_allreduce/enable_allreduce. Wrap the backward passes that must not all-reduce
(gradient accumulation micro-steps) in `with model.no_sync():` instead. Until then the module keeps
apex DDP (its constructor and import are not rewritten): a torch DDP there would fail at the first
toggle. Rerun apex2amp once the toggles are gone.""",
     before="""
from apex.parallel import DistributedDataParallel as DDP


def step(model, loss):
    model = DDP(model)
    model.disable_allreduce()
    loss.backward()
    model.enable_allreduce()""",
     after="""
with model.no_sync():
    loss.backward()""")


def _line(positions, node: cst.CSTNode) -> int:
    pos = positions.get(node)
    return pos.start.line if pos is not None else 0


def ddp_call(call: cst.Call, module: cst.Module, parents, positions, table: ImportTable,
             ctx: FileContext) -> Optional[cst.Call]:
    if any(a.star for a in call.args):
        ctx.report(call, "A2A202", "apex DistributedDataParallel called with */** arguments: map them to "
                   "torch DDP by hand (device_ids=[local_rank], find_unused_parameters for delay_allreduce)")
        return None
    positional = [a for a in call.args if a.keyword is None]
    if len(positional) != 1:
        ctx.report(call, "A2A202", "apex DistributedDataParallel with positional options: pass them by "
                   "keyword, then rerun apex2amp")
        return None
    notes: List[str] = []
    drop: List[cst.Arg] = []
    replace: Dict[int, cst.Arg] = {}
    have = {a.keyword.value for a in call.args if a.keyword is not None}
    for i, a in enumerate(call.args):
        if a.keyword is None:
            continue
        k = a.keyword.value
        if k in DROPPED_DDP_KWARGS:
            drop.append(a)
            notes.append(f"dropped {k}= (no torch equivalent)")
        elif k == "delay_allreduce":
            if is_false(a.value):
                drop.append(a)
            elif "find_unused_parameters" in have:
                drop.append(a)
            else:
                replace[i] = a.with_changes(keyword=cst.Name("find_unused_parameters"))
                notes.append("delay_allreduce -> find_unused_parameters")
        elif k == "gradient_average":
            if is_true(a.value):
                drop.append(a)
            else:
                ctx.report(call, "A2A202", "apex DDP gradient_average=False sums gradients: use torch DDP "
                           "with a comm hook that all-reduces without dividing (register_comm_hook)")
                return None
        elif k == "shared_param":
            if isinstance(a.value, cst.Name) and a.value.value == "None":
                drop.append(a)
            else:
                ctx.report(call, "A2A202", "apex DDP shared_param is not supported by torch DDP")
                return None
        elif k in ("module",):
            continue
        else:
            ctx.report(call, "A2A202", f"apex DDP argument {k}= has no known torch mapping")
            return None
    new_args: List[cst.Arg] = []
    local_rank = local_rank_expr(call, module, parents, positions, table)
    if "device_ids" not in have:
        if local_rank is not None:
            new_args.append(kwarg("device_ids", cst.List([cst.Element(local_rank)])))
        else:
            notes.append("no local-rank expression found: add device_ids=[local_rank] for a CUDA module")
    if "broadcast_buffers" not in have:
        new_args.append(kwarg("broadcast_buffers", cst.Name("False")))
        notes.append("broadcast_buffers=False keeps apex's per-rank buffers (drop it for torch's default)")
    idx = call.args.index(positional[0])
    new = edit_args(call, drop=drop, replace=replace, insert_after=idx, new=new_args)
    msg = "apex DistributedDataParallel -> torch.nn.parallel.DistributedDataParallel"
    if notes:
        msg += "; " + "; ".join(notes)
    ctx.report(call, "A2A201", msg, fixed=True)
    return new

def local_rank_expr(call: cst.Call, module: cst.Module, parents, positions,
                    table: ImportTable) -> Optional[cst.BaseExpression]:
    """The current device's local-rank expression visible before `call` in its function (or module)."""
    scope = enclosing(call, parents, (cst.FunctionDef,)) or module
    line = _line(positions, call)
    set_device: List[Tuple[int, cst.BaseExpression]] = []
    reads: List[Tuple[int, int, cst.BaseExpression]] = []  # (priority, line, expr)
    params: List[cst.BaseExpression] = []
    if isinstance(scope, cst.FunctionDef):
        for p in scope.params.params:
            if p.name.value in LOCAL_RANK_ATTRS:
                params.append(cst.Name(p.name.value))

    class V(Visitor):
        def visit_FunctionDef(self, n: cst.FunctionDef) -> bool:
            return n is scope

        def visit_Call(self, n: cst.Call) -> None:
            if n.args and table.refers_to(n.func, "torch.cuda.set_device", "torch.accelerator.set_device_index",
                                          "torch.cuda.set_device_index"):
                ln = _line(positions, n)
                if 0 < ln <= line and not n.args[0].star and n.args[0].keyword is None and \
                        not guarded_by_own_value(n, call, parents):
                    set_device.append((ln, n.args[0].value))

        def visit_Attribute(self, n: cst.Attribute) -> bool:
            d = dotted_name(n)
            if d and d.split(".")[-1] in LOCAL_RANK_ATTRS and "." in d:
                ln = _line(positions, n)
                if 0 < ln <= line:
                    last = d.split(".")[-1]
                    reads.append((0 if last == "local_rank" else 1, -ln, n))
                return False
            return True

        def visit_Name(self, n: cst.Name) -> None:
            if n.value == "local_rank":
                ln = _line(positions, n)
                if 0 < ln <= line:
                    reads.append((0, -ln, n))

    scope.visit(V())
    if set_device:
        expr = max(set_device, key=lambda t: t[0])[1]
        if not _is_simple_device_expr(expr):
            return None
        return expr.deep_clone()
    if params:
        return params[0]
    if scope is not module:
        # `torch.cuda.set_device(args.local_rank)` at module level (a script's top) runs before the
        # function does: it names the device better than any `args.gpu` read in the function
        line = 10 ** 9
        for stmt in module.body:
            if not isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                stmt.visit(V())
        if set_device:
            expr = max(set_device, key=lambda t: t[0])[1]
            return expr.deep_clone() if _is_simple_device_expr(expr) else None
    if reads:
        reads.sort(key=lambda t: (t[0], t[1]))
        return parse_expr(code_of(reads[0][2]))
    return None


def _is_simple_device_expr(e: cst.BaseExpression) -> bool:
    """Names, attributes, subscripts and arithmetic on them: safe to repeat in device_ids=[...]."""
    ok = True

    class V(Visitor):
        def visit_Call(self, n: cst.Call) -> bool:
            nonlocal ok
            f = dotted_name(n.func)
            if f not in ("int", "torch.cuda.device_count", "torch.accelerator.device_count"):
                ok = False
            return True

    e.visit(V())
    return ok
