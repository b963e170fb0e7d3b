"""apex.parallel DistributedDataParallel / SyncBatchNorm -> torch.nn.parallel / torch.nn.SyncBatchNorm.

Names are resolved through imports: a `DDP` bound to torch's class is never touched. A name bound by
`from apex.parallel import X as Y` keeps the user's alias: the import itself is replaced
(`from torch.nn.parallel import DistributedDataParallel as DDP`). Calls whose arguments cannot be
mapped (gradient_average=False, **kwargs, odd positionals) are left alone and reported.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Set, Tuple

import libcst as cst

from . import try_imports
from .base import FIX, WARNING, Codemod, FileContext, rule
from .edits import EditPlan, apply_plan
from .device_guards import guarded_by_own_value
from .importing import add_helper_function, ensure_imports
from .index import ModuleIndex, parent_mapping, positions_of
from .names import ImportTable, code_of, dotted_name, literal_number, parse_expr
from .walk import Visitor

DDP_TORCH = "torch.nn.parallel.DistributedDataParallel"
SYNCBN_TORCH = "torch.nn.SyncBatchNorm"

# apex qualified name -> (torch module, torch name)
CLASS_MAP: Dict[str, Tuple[str, str]] = {
    "apex.parallel.DistributedDataParallel": ("torch.nn.parallel", "DistributedDataParallel"),
    "apex.parallel.distributed.DistributedDataParallel": ("torch.nn.parallel", "DistributedDataParallel"),
    "apex.parallel.SyncBatchNorm": ("torch.nn", "SyncBatchNorm"),
    "apex.parallel.optimized_sync_batchnorm.SyncBatchNorm": ("torch.nn", "SyncBatchNorm"),
    "apex.parallel.sync_batchnorm.SyncBatchNorm": ("torch.nn", "SyncBatchNorm"),
    "apex.parallel.ReduceOp": ("torch.distributed", "ReduceOp"),
}
DDP_NAMES = {"apex.parallel.DistributedDataParallel", "apex.parallel.distributed.DistributedDataParallel"}
SYNCBN_NAMES = {"apex.parallel.SyncBatchNorm", "apex.parallel.optimized_sync_batchnorm.SyncBatchNorm",
                "apex.parallel.sync_batchnorm.SyncBatchNorm"}
CONVERT_NAMES = {"apex.parallel.convert_syncbn_model"}
GROUP_NAMES = {"apex.parallel.create_syncbn_process_group"}
REPORT_ONLY = {
    "apex.parallel.LARC": "A2A220",
    "apex.parallel.LARC.LARC": "A2A220",
    "apex.parallel.Reducer": "A2A221",
    "apex.parallel.distributed.Reducer": "A2A221",
    "apex.parallel.multiproc": "A2A223",
}

# apex DDP keywords with no torch equivalent whose dropping keeps the result (spec section 3)
DROPPED_DDP_KWARGS = {
    "message_size", "allreduce_always_fp32", "gradient_predivide_factor", "num_allreduce_streams",
    "allreduce_communicators", "retain_allreduce_buffers", "allreduce_trigger_params", "prof",
    "gradient_average_split_factor",
}
LOCAL_RANK_ATTRS = ("local_rank", "gpu", "local_gpu", "gpu_id")

HELPER_NAME = "syncbn_process_group"
HELPER_CODE = '''def {name}(group_size):
    """apex.parallel.create_syncbn_process_group on torch.distributed (added by apex2amp).

    Splits the world into consecutive groups of `group_size` ranks and returns this rank's group
    (None when group_size is 0: SyncBatchNorm then syncs over the whole world). Call it on every rank.
    """
    if group_size == 0:
        return None
    world_size = torch.distributed.get_world_size()
    assert world_size >= group_size and world_size % group_size == 0
    group = None
    for group_num in range(world_size // group_size):
        ranks = list(range(group_num * group_size, (group_num + 1) * group_size))
        new_group = torch.distributed.new_group(ranks=ranks)
        if torch.distributed.get_rank() // group_size == group_num:
            group = new_group
    return group
'''

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

rule("A2A210", "apex-syncbn-to-torch", "apex.parallel.SyncBatchNorm -> torch.nn.SyncBatchNorm",
     fixes=True, severity=FIX,
     why="""
torch.nn.SyncBatchNorm takes the same leading arguments (num_features, eps, momentum, affine,
track_running_stats, process_group). apex's channel_last and fuse_relu have no equivalent (reported).""",
     before="""
import apex

bn = apex.parallel.SyncBatchNorm(64)""",
     after="""
import torch

bn = torch.nn.SyncBatchNorm(64)""")

rule("A2A211", "apex-convert-syncbn", "apex.parallel.convert_syncbn_model -> torch.nn.SyncBatchNorm.convert_sync_batchnorm",
     fixes=True, severity=FIX,
     why="""
torch.nn.SyncBatchNorm.convert_sync_batchnorm(module, process_group=None) replaces every BatchNorm*D
with SyncBatchNorm like apex did. apex skipped InstanceNorm layers; torch does too (they are not
_BatchNorm subclasses).""",
     before="""
import apex


def prepare(model):
    return apex.parallel.convert_syncbn_model(model)""",
     after="""
import torch


def prepare(model):
    return torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)""")

rule("A2A212", "apex-syncbn-channel-last", "SyncBatchNorm channel_last / fuse_relu has no torch equivalent",
     fixes=False, severity=WARNING,
     why="""
apex's SyncBatchNorm(channel_last=True) normalised over the last logical dimension and fuse_relu=True
fused a ReLU (forward(input, z)). torch.nn.SyncBatchNorm supports neither: permute the input to
channels-first (or use memory_format=torch.channels_last, which keeps the logical NCHW layout) and apply
the ReLU yourself.""",
     before="""
from apex.parallel import convert_syncbn_model


def prepare(model):
    return convert_syncbn_model(model, channel_last=True)""",
     after="model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)  # inputs in NCHW")

rule("A2A213", "apex-syncbn-process-group", "apex.parallel.create_syncbn_process_group -> helper on dist.new_group",
     fixes=True, severity=FIX,
     why="""
torch has no create_syncbn_process_group. The tool adds a small helper `syncbn_process_group(group_size)`
to the file that builds the same groups of consecutive ranks with torch.distributed.new_group (every rank
must call it, as with apex) and returns this rank's group, None for group_size 0.""",
     before="""
from apex.parallel import create_syncbn_process_group


def groups(args):
    return create_syncbn_process_group(args.group_size)""",
     after='''
import torch


def syncbn_process_group(group_size):
    """apex.parallel.create_syncbn_process_group on torch.distributed (added by apex2amp).

    Splits the world into consecutive groups of `group_size` ranks and returns this rank's group
    (None when group_size is 0: SyncBatchNorm then syncs over the whole world). Call it on every rank.
    """
    if group_size == 0:
        return None
    world_size = torch.distributed.get_world_size()
    assert world_size >= group_size and world_size % group_size == 0
    group = None
    for group_num in range(world_size // group_size):
        ranks = list(range(group_num * group_size, (group_num + 1) * group_size))
        new_group = torch.distributed.new_group(ranks=ranks)
        if torch.distributed.get_rank() // group_size == group_num:
            group = new_group
    return group


def groups(args):
    return syncbn_process_group(args.group_size)''')

rule("A2A220", "apex-larc", "apex.parallel.LARC has no torch equivalent",
     fixes=False, severity=WARNING,
     why="""
LARC (layer-wise adaptive rate clipping) wraps an optimizer; torch has no such wrapper. Vendor the
~100-line class from apex 25.05 (BSD licence) into your project or keep apex <= 25.05 installed.""",
     before="""
from apex.parallel.LARC import LARC


def wrap(optimizer):
    return LARC(optimizer, trust_coefficient=0.02)""",
     after="optimizer = LARC(optimizer, trust_coefficient=0.02)  # LARC vendored in my_project/larc.py")

rule("A2A221", "apex-reducer", "apex.parallel.Reducer -> all_reduce by hand",
     fixes=False, severity=WARNING,
     why="""
apex's Reducer all-reduced and averaged gradients when .reduce() was called. Replace it with a loop of
torch.distributed.all_reduce over the gradients followed by a division by the world size, or with DDP.""",
     before="""
from apex.parallel import Reducer


def sync(model):
    reducer = Reducer(model)
    reducer.reduce()""",
     after="""
for p in model.parameters():
    if p.grad is not None:
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()""")

rule("A2A222", "apex-reduceop", "apex.parallel.ReduceOp -> torch.distributed.ReduceOp",
     fixes=True, severity=FIX,
     why="apex.parallel re-exported torch.distributed.ReduceOp; use torch's directly.",
     before="from apex.parallel import ReduceOp",
     after="from torch.distributed import ReduceOp")

rule("A2A223", "apex-multiproc", "apex.parallel.multiproc launcher -> torchrun",
     fixes=False, severity=WARNING,
     why="""
`python -m apex.parallel.multiproc main.py` started one process per GPU and appended
`--world-size N --rank i` to each one's arguments. Launch with `torchrun --nproc_per_node=gpu main.py`
instead and read RANK / WORLD_SIZE / LOCAL_RANK from the environment.""",
     before="""
#!/bin/bash
python -m apex.parallel.multiproc main.py --epochs 90""",
     after="torchrun --standalone --nproc_per_node=gpu main.py --epochs 90")


# -- argument list editing (shared with the launch codemod) ------------------------------------------

_SPACE_COMMA = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))


def kwarg(name: str, value: cst.BaseExpression) -> cst.Arg:
    """A `name=value` argument in the compact style (no spaces around `=`)."""
    return cst.Arg(value=value, keyword=cst.Name(name),
                   equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                         whitespace_after=cst.SimpleWhitespace("")))


def edit_args(call: cst.Call, *, drop: Sequence[cst.Arg] = (), replace: Optional[Dict[int, cst.Arg]] = None,
              insert_after: int = -1, new: Sequence[cst.Arg] = ()) -> cst.Call:
    """Drop some arguments (by identity), replace some (by original index) and insert `new` after index
    `insert_after` of the original list, keeping the commas' whitespace style of the call."""
    replace = replace or {}
    drop_ids = {id(a) for a in drop}
    orig = list(call.args)
    sep: cst.Comma = next((a.comma for a in orig if isinstance(a.comma, cst.Comma)
                           and a is not orig[-1]), _SPACE_COMMA)
    out: List[cst.Arg] = []
    keep: Set[int] = set()  # arguments (kept or replaced) whose own comma, line break and all, stays
    trailing = orig[-1].comma if orig else cst.MaybeSentinel.DEFAULT
    for i, a in enumerate(orig):
        if id(a) not in drop_ids:
            r = replace.get(i, a)
            if i < len(orig) - 1 and isinstance(a.comma, cst.Comma):
                r = r if r is a else r.with_changes(comma=a.comma)
                keep.add(id(r))
            out.append(r)
        if i == insert_after:
            out.extend(new)
    if insert_after >= len(orig) or (insert_after < 0 and new and not orig):
        out.extend(new)
    # what stood between the last argument and `)` (a newline in a call laid out over lines) stays there
    closing = orig[-1].whitespace_after_arg if orig else cst.SimpleWhitespace("")
    fixed: List[cst.Arg] = []
    for i, a in enumerate(out):
        was_last = bool(orig) and a is orig[-1]
        if i == len(out) - 1:
            fixed.append(a.with_changes(comma=trailing, whitespace_after_arg=closing))
        elif id(a) in keep:
            fixed.append(a)
        else:
            a = a.with_changes(whitespace_after_arg=cst.SimpleWhitespace("")) if was_last else a
            fixed.append(a.with_changes(comma=sep))
    return call.with_changes(args=fixed)


def enclosing(node: cst.CSTNode, parents, kinds) -> Optional[cst.CSTNode]:
    """The nearest ancestor of one of `kinds` (or None)."""
    cur = parents.get(node)
    while cur is not None and not isinstance(cur, kinds):
        cur = parents.get(cur)
    return cur


def statement_of(node: cst.CSTNode, parents) -> Optional[cst.CSTNode]:
    """The statement line (or compound statement) that holds `node`."""
    cur: Optional[cst.CSTNode] = node
    while cur is not None and not isinstance(cur, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
        cur = parents.get(cur)
    return cur


def _edit_code(q: str) -> str:
    """The rule whose edit migrates the apex.parallel name `q` (a report-only name: its finding's rule)."""
    if q in DDP_NAMES or any(q.startswith(d + ".") for d in DDP_NAMES):
        return "A2A201"
    if q in SYNCBN_NAMES or any(q.startswith(n + ".") for n in SYNCBN_NAMES):
        return "A2A210"
    if q in CONVERT_NAMES:
        return "A2A211"
    if q in GROUP_NAMES:
        return "A2A213"
    if q.startswith("apex.parallel.ReduceOp"):
        return "A2A222"
    return REPORT_ONLY.get(q, "A2A202")


def _line(positions, node: cst.CSTNode) -> int:
    pos = positions.get(node)
    return pos.start.line if pos is not None else 0


class _Refs(Visitor):
    """Every call to, and every reference of, an apex.parallel name."""

    def __init__(self, table: ImportTable):
        self.table = table
        self.calls: List[Tuple[cst.Call, str]] = []
        self.attr_refs: List[Tuple[cst.Attribute, str]] = []  # non-call dotted references (apex.parallel.X)
        self.name_refs: Dict[str, List[cst.Name]] = {}
        self.toggles: List[cst.Call] = []

    def _q(self, node: cst.BaseExpression) -> Optional[str]:
        qs = [q for q in self.table.qualified_names(node) if q.startswith("apex.parallel")]
        return qs[0] if qs else None

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def visit_Call(self, node: cst.Call) -> None:
        q = self._q(node.func)
        if q:
            self.calls.append((node, q))
        if isinstance(node.func, cst.Attribute) and node.func.attr.value in ("disable_allreduce", "enable_allreduce"):
            self.toggles.append(node)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        q = self._q(node)
        if q:
            self.attr_refs.append((node, q))
            return False
        return True

    def visit_Name(self, node: cst.Name) -> None:
        if node.value in self.table.bindings:
            self.name_refs.setdefault(node.value, []).append(node)

    @classmethod
    def of(cls, table: ImportTable, index: ModuleIndex) -> "_Refs":
        """What `module.visit(_Refs(table))` finds, in the same order, from the shared index.

        Calls are never inside imports or dotted names, so every call is seen. A dotted reference can
        only resolve when its head name is bound by an import, so only chains headed by such a name
        are examined: from the outermost Attribute down, the first that resolves under apex.parallel
        is recorded and the names below it are skipped, as the visitor's pruning does."""
        refs = cls(table)
        for call in index.calls:
            refs.visit_Call(call)
        bindings = table.bindings
        parents = index.parents
        skipped: Set[int] = set()
        for name in index.names:
            if name.value not in bindings or id(name) in skipped or _in_import(name, parents):
                continue
            chain: List[cst.CSTNode] = [name]
            up = parents.get(id(name))
            while isinstance(up, cst.Attribute) and up.value is chain[-1]:
                chain.append(up)
                up = parents.get(id(up))
            for j in range(len(chain) - 1, 0, -1):
                q = refs._q(chain[j])  # type: ignore[arg-type]
                if q:
                    refs.attr_refs.append((chain[j], q))  # type: ignore[arg-type]
                    skipped.update(id(a.attr) for a in chain[1:j + 1])  # type: ignore[attr-defined]
                    skipped.add(id(name))
                    break
            if id(name) not in skipped:
                refs.visit_Name(name)
        return refs


def _in_import(node: cst.CSTNode, parents: Dict[int, cst.CSTNode]) -> bool:
    """Whether `node` lies inside an import statement (walking up to its statement)."""
    cur = parents.get(id(node))
    while cur is not None and not isinstance(cur, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
        cur = parents.get(id(cur))
    return isinstance(cur, (cst.Import, cst.ImportFrom))


class ApexParallelToTorchDDP(Codemod):
    """apex.parallel DistributedDataParallel / SyncBatchNorm -> torch.nn.parallel / torch.nn.SyncBatchNorm."""

    NAME = "apex_parallel"
    DESCRIPTION = "apex.parallel DistributedDataParallel / SyncBatchNorm -> torch.nn.parallel / torch.nn.SyncBatchNorm"
    CODES = ("A2A201", "A2A202", "A2A203", "A2A210", "A2A211", "A2A212", "A2A213", "A2A220", "A2A221",
             "A2A222", "A2A223")
    WORDS = (b"apex",)

    def transform(self, wrapper: cst.MetadataWrapper, ctx: FileContext) -> cst.Module:
        module = wrapper.module
        table = ImportTable.of(module, ctx.module_name)
        if not any(q.startswith("apex.parallel") or q == "apex"
                   for qs in table.bindings.values() for q in qs) and "apex.parallel" not in table.star_modules:
            return module
        parents = parent_mapping(module)
        positions = positions_of(module)
        refs = _Refs.of(table, ModuleIndex.of(module))
        plan = EditPlan()
        need_torch = False
        add_helper = False
        for mod in table.star_modules:
            if mod.startswith("apex.parallel"):
                for stmt in table.star_modules[mod]:
                    ctx.report(stmt, "A2A202", "`from apex.parallel import *`: import the names you use from "
                               "torch.nn.parallel / torch.nn / torch.distributed instead")

        # which local names (bound by `from apex.parallel import X as N`) may have their import replaced
        replace_names: Dict[str, Tuple[str, str, str]] = {}  # local -> (apex qualified, torch module, torch name)
        blocked: Set[str] = set()
        name_calls: Dict[str, List[Tuple[cst.Call, str]]] = {}
        for call, q in refs.calls:
            if isinstance(call.func, cst.Name):
                name_calls.setdefault(call.func.value, []).append((call, q))
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
            if not ctx.enabled(_edit_code(apex_qs[0])):
                continue  # a deselected rule's name keeps apex's import
            replace_names[local] = (apex_qs[0],) + CLASS_MAP[apex_qs[0]]

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
            if ctx.suppressed(call, "A2A2") or not ctx.enabled(_edit_code(q)):
                keep_apex_import(call)
                continue
            if q in DDP_NAMES and toggled:
                ctx.report(call, "A2A203", "apex DDP kept: this module calls its disable_allreduce()/"
                           "enable_allreduce(), which torch DDP does not have; rewrite those as `with "
                           "model.no_sync():` around the micro-step backward passes, then run apex2amp again")
                keep_apex_import(call)
                continue
            if q in DDP_NAMES:
                new = self._ddp_call(call, module, parents, positions, table, ctx)
                if new is None:
                    keep_apex_import(call)
                    continue
                if isinstance(call.func, cst.Attribute):
                    new = new.with_changes(func=parse_expr(DDP_TORCH))
                    need_torch = True
                plan.replace_node[call] = new
            elif q in SYNCBN_NAMES:
                bad = [a for a in call.args if a.keyword is not None and a.keyword.value in ("channel_last", "fuse_relu")
                       and not _is_false(a.value)]
                positional = [a for a in call.args if a.keyword is None]
                if bad or len(positional) > 6 or any(a.star for a in call.args):
                    ctx.report(call, "A2A212", "SyncBatchNorm with channel_last/fuse_relu (or extra positional "
                               "arguments) has no torch equivalent: use torch.nn.SyncBatchNorm on NCHW input and "
                               "apply the ReLU yourself")
                    keep_apex_import(call)
                    continue
                keep = [a for a in call.args if not (a.keyword is not None and a.keyword.value in ("channel_last", "fuse_relu"))]
                new = call.with_changes(args=keep) if len(keep) != len(call.args) else call
                if len(keep) != len(call.args):
                    new = edit_args(call, drop=[a for a in call.args if a not in keep])
                if isinstance(call.func, cst.Attribute):
                    new = new.with_changes(func=parse_expr(SYNCBN_TORCH))
                    need_torch = True
                plan.replace_node[call] = new
                ctx.report(call, "A2A210", "apex.parallel.SyncBatchNorm -> torch.nn.SyncBatchNorm", fixed=True)
            elif q in CONVERT_NAMES:
                bad = [a for a in call.args if a.keyword is not None and a.keyword.value == "channel_last"
                       and not _is_false(a.value)]
                positional = [a for a in call.args if a.keyword is None]
                if bad or len(positional) > 2 or any(a.star for a in call.args) or not call.args:
                    ctx.report(call, "A2A212", "convert_syncbn_model(channel_last=True) has no torch equivalent: "
                               "use torch.nn.SyncBatchNorm.convert_sync_batchnorm(model) on NCHW input")
                    continue
                drop = [a for a in call.args if a.keyword is not None and a.keyword.value == "channel_last"]
                new = edit_args(call, drop=drop) if drop else call
                new = new.with_changes(func=parse_expr("torch.nn.SyncBatchNorm.convert_sync_batchnorm"))
                need_torch = True
                plan.replace_node[call] = new
                ctx.report(call, "A2A211", "convert_syncbn_model -> torch.nn.SyncBatchNorm.convert_sync_batchnorm",
                           fixed=True)
            elif q in GROUP_NAMES:
                new = call.with_changes(func=cst.Name(HELPER_NAME))
                plan.replace_node[call] = new
                add_helper = need_torch = True
                ctx.report(call, "A2A213", f"create_syncbn_process_group -> {HELPER_NAME} (a helper added to this "
                           "file, built on torch.distributed.new_group)", fixed=True)
            elif q in REPORT_ONLY:
                code = REPORT_ONLY[q]
                ctx.report(call, code, RULES_MSG[code])

        # non-call dotted references: apex.parallel.SyncBatchNorm in isinstance(...), ReduceOp.SUM, ...
        for attr, q in refs.attr_refs:
            if any(attr is c.func for c, _ in refs.calls):
                continue
            head = dotted_name(attr)
            if head and head.split(".")[0] in replace_names:
                continue  # the import itself is replaced; `ReduceOp.MAX` keeps working
            if toggled and any(q == d or q.startswith(d + ".") for d in DDP_NAMES):
                continue  # apex DDP stays in this module (see above)
            for mapped, (tmod, tname) in CLASS_MAP.items():
                if q == mapped or q.startswith(mapped + "."):
                    rest = q[len(mapped):]
                    if ctx.suppressed(attr, "A2A2") or not ctx.enabled(_edit_code(q)):
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

        # import statements binding replaceable names
        by_stmt: Dict[int, Tuple[cst.ImportFrom, List[str]]] = {}
        for local in replace_names:
            for stmt in table.statements.get(local, []):
                if isinstance(stmt, cst.ImportFrom):
                    by_stmt.setdefault(id(stmt), (stmt, []))[1].append(local)
        for stmt, locals_ in by_stmt.values():
            line = statement_of(stmt, parents)
            if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
                continue
            new_lines = self._split_import(line, stmt, locals_, replace_names)
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
        # report-only imports (LARC, Reducer, multiproc) bound by name
        for local, qs in table.bindings.items():
            for q in qs:
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
        if need_torch:
            new_module = ensure_imports(new_module, ["torch"])
        return new_module

    # -- DDP ------------------------------------------------------------------------------------------
    def _ddp_call(self, call: cst.Call, module: cst.Module, parents, positions, table: ImportTable,
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
                if _is_false(a.value):
                    drop.append(a)
                elif "find_unused_parameters" in have:
                    drop.append(a)
                else:
                    replace[i] = a.with_changes(keyword=cst.Name("find_unused_parameters"))
                    notes.append("delay_allreduce -> find_unused_parameters")
            elif k == "gradient_average":
                if _is_true(a.value):
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
        local_rank = self._local_rank_expr(call, module, parents, positions, table)
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

    def _local_rank_expr(self, call: cst.Call, module: cst.Module, parents, positions,
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

    def _split_import(self, line: cst.SimpleStatementLine, stmt: cst.ImportFrom, locals_: List[str],
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
            fixed = [a.with_changes(comma=_SPACE_COMMA) for a in aliases[:-1]] + [aliases[-1]]
            new_stmt = cst.ImportFrom(module=parse_expr(tmod), names=fixed)  # type: ignore[arg-type]
            if not out:
                out.append(line.with_changes(body=[new_stmt]))
            else:
                out.append(cst.SimpleStatementLine(body=[new_stmt],
                                                   trailing_whitespace=cst.TrailingWhitespace()))
        return out


RULES_MSG = {
    "A2A220": "apex.parallel.LARC has no torch equivalent: vendor the LARC class from apex 25.05 or keep apex "
              "<= 25.05 for it",
    "A2A221": "apex.parallel.Reducer: replace .reduce() with dist.all_reduce over the gradients divided by the "
              "world size, or use torch DDP",
    "A2A223": "apex.parallel.multiproc: launch with `torchrun --nproc_per_node=gpu SCRIPT` and read RANK / "
              "WORLD_SIZE / LOCAL_RANK from the environment",
}


def _is_false(e: cst.BaseExpression) -> bool:
    return (isinstance(e, cst.Name) and e.value == "False") or literal_number(e) == 0


def _is_true(e: cst.BaseExpression) -> bool:
    return (isinstance(e, cst.Name) and e.value == "True") or literal_number(e) == 1


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
