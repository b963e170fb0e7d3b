"""apex.parallel SyncBatchNorm -> torch.nn.SyncBatchNorm (A2A210), convert_syncbn_model ->
SyncBatchNorm.convert_sync_batchnorm (A2A211), create_syncbn_process_group -> a helper on
torch.distributed.new_group added to the file (A2A213); channel_last / fuse_relu, which torch lacks,
reported (A2A212)."""
from __future__ import annotations

from typing import Optional

import libcst as cst

from .arg_edits import edit_args, is_false
from .base import FIX, WARNING, FileContext, rule
from .names import parse_expr

SYNCBN_TORCH = "torch.nn.SyncBatchNorm"

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


def syncbn_call(call: cst.Call, ctx: FileContext) -> Optional[cst.Call]:
    """`SyncBatchNorm(...)` as torch's (a dotted callee spelled torch's); None when it has apex-only
    options (reported: the call stays apex's)."""
    bad = [a for a in call.args if a.keyword is not None and a.keyword.value in ("channel_last", "fuse_relu")
           and not is_false(a.value)]
    positional = [a for a in call.args if a.keyword is None]
    if bad or len(positional) > 6 or any(a.star for a in call.args):
        ctx.report(call, "A2A212", "SyncBatchNorm with channel_last/fuse_relu (or extra positional "
                   "arguments) has no torch equivalent: use torch.nn.SyncBatchNorm on NCHW input and "
                   "apply the ReLU yourself")
        return None
    keep = [a for a in call.args if not (a.keyword is not None and a.keyword.value in ("channel_last", "fuse_relu"))]
    new = call.with_changes(args=keep) if len(keep) != len(call.args) else call
    if len(keep) != len(call.args):
        new = edit_args(call, drop=[a for a in call.args if a not in keep])
    if isinstance(call.func, cst.Attribute):
        new = new.with_changes(func=parse_expr(SYNCBN_TORCH))
    ctx.report(call, "A2A210", "apex.parallel.SyncBatchNorm -> torch.nn.SyncBatchNorm", fixed=True)
    return new


def convert_call(call: cst.Call, ctx: FileContext) -> Optional[cst.Call]:
    """`convert_syncbn_model(model)` -> `torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)`; None when
    it asks for channel_last or has arguments torch's does not take (reported)."""
    bad = [a for a in call.args if a.keyword is not None and a.keyword.value == "channel_last"
           and not is_false(a.value)]
    positional = [a for a in call.args if a.keyword is None]
    if bad or len(positional) > 2 or any(a.star for a in call.args) or not call.args:
        ctx.report(call, "A2A212", "convert_syncbn_model(channel_last=True) has no torch equivalent: "
                   "use torch.nn.SyncBatchNorm.convert_sync_batchnorm(model) on NCHW input")
        return None
    drop = [a for a in call.args if a.keyword is not None and a.keyword.value == "channel_last"]
    new = edit_args(call, drop=drop) if drop else call
    new = new.with_changes(func=parse_expr("torch.nn.SyncBatchNorm.convert_sync_batchnorm"))
    ctx.report(call, "A2A211", "convert_syncbn_model -> torch.nn.SyncBatchNorm.convert_sync_batchnorm",
               fixed=True)
    return new


def group_call(call: cst.Call, ctx: FileContext) -> cst.Call:
    """`create_syncbn_process_group(n)` -> `syncbn_process_group(n)` (the helper the file then gets)."""
    new = call.with_changes(func=cst.Name(HELPER_NAME))
    ctx.report(call, "A2A213", f"create_syncbn_process_group -> {HELPER_NAME} (a helper added to this "
               "file, built on torch.distributed.new_group)", fixed=True)
    return new
