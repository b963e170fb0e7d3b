"""Rule codes of the opt-in `--target fsdp2` migration (A2A8xx): DDP + autocast -> `fully_shard`."""
from __future__ import annotations

from .base import FIX, INFO, WARNING, rule

rule("A2A801", "ddp-to-fully-shard", "DDP wrap -> `fully_shard` per repeated block, then the root, with a MixedPrecisionPolicy",
     fixes=True, severity=FIX,
     why="""
Under `--target fsdp2` the DistributedDataParallel wrap becomes FSDP2: `fully_shard` on each block of
the model's repeated layer list (a `ModuleList`/`Sequential` assigned in the model class's `__init__`,
found statically), then on the root, all with
`MixedPrecisionPolicy(param_dtype=<the autocast dtype>, reduce_dtype=torch.float32)`. That is what apex
O2 was for: low-precision parameters for compute, full-precision sharded parameters as the master copy,
full-precision gradient reduction. fp16 keeps its GradScaler (it works with FSDP2), bf16 has none.
Autocast stays around forward and loss. Where autocast is switched by a flag, the policy is too
(`param_dtype=torch.float16 if use_amp else torch.float32`). The optimizer must be built on the sharded
parameters: a construction before the wrap moves after it. `DDP`'s arguments (`device_ids`,
`output_device`, `broadcast_buffers`) go: FSDP2 places the shards on the device mesh.""",
     before="""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main(model, loader):
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    model = model.cuda()
    model = DDP(model, device_ids=[local_rank])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()""",
     after="""
import os

import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard


def main(model, loader):
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    model = model.cuda()
    mp_policy = MixedPrecisionPolicy(param_dtype=torch.float16, reduce_dtype=torch.float32)
    fully_shard(model, mp_policy=mp_policy)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()""")

rule("A2A802", "fsdp2-single-process", "single-process training: FSDP needs a process group, code left as it is",
     fixes=False, severity=WARNING,
     why="""
FSDP2 shards parameters across the ranks of a process group. A script that trains in one process (no
DDP wrap, no `init_process_group`) has nothing to shard across: `--target fsdp2` leaves it on the default
target (autocast + GradScaler). Launch it under torchrun with a process group and a DDP wrap first, or
run the default target.""",
     before="""
import torch


def main(model, loader):
    model = model.cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()""",
     after="""
# unchanged: A2A802 at the optimizer""")

rule("A2A803", "fsdp2-no-repeated-block", "no repeated block found statically: only the root is sharded; add per-block `fully_shard` calls",
     fixes=False, severity=WARNING,
     flags=("--target", "fsdp2", "--min-torch", "2.6"), why="""
FSDP2 saves memory by sharding each transformer block (or other repeated layer) on its own, so that
only one block's parameters are gathered at a time. When the model's class is not in this file, or
its `__init__` assigns no `nn.ModuleList`/`nn.Sequential` of repeated layers, only the root gets
`fully_shard`: correct, but the whole model is gathered at once. Add `fully_shard(block, mp_policy=...)`
for each block before the root call.""",
     before="""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from models import build_model


def train(cfg, local_rank):
    dist.init_process_group("nccl")
    model = build_model(cfg).to(local_rank)
    ddp_model = DistributedDataParallel(model, device_ids=[local_rank])
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.1, momentum=0.9)
    for x, y in cfg.data:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(ddp_model(x), y)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ddp_model.parameters(), 1.0)
        optimizer.step()""",
     after="""
import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from models import build_model


def train(cfg, local_rank):
    dist.init_process_group("nccl")
    model = build_model(cfg).to(local_rank)
    mp_policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    ddp_model = fully_shard(model, mp_policy=mp_policy)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.1, momentum=0.9)
    for x, y in cfg.data:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(ddp_model(x), y)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ddp_model.parameters(), 1.0)
        optimizer.step()""")

rule("A2A804", "fsdp2-optimizer-before-wrap", "optimizer built before the wrap and not movable after it: code left as it is",
     fixes=False, severity=WARNING,
     flags=("--target", "fsdp2", "--min-torch", "2.6"), why="""
`fully_shard` replaces the model's parameters with sharded DTensors: an optimizer built before it holds
the old, unsharded tensors and would train nothing. The construction moves after the sharding when it
sits in the same block as the wrap and nothing in between reads the optimizer or changes what it is
built from. Otherwise the file is left as it is: build the optimizer after `fully_shard` by hand.""",
     before="""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main(args, model):
    dist.init_process_group("nccl")
    if args.sgd:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model = DDP(model)
    scaler = torch.amp.GradScaler("cuda")
    for x in args.data:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()""",
     after="""
# unchanged: A2A804 at the optimizer""")

rule("A2A805", "no-sync-to-set-requires-gradient-sync", "`with model.no_sync():` -> `model.set_requires_gradient_sync(False)` ... `(True)`",
     fixes=True, severity=FIX,
     flags=("--target", "fsdp2", "--min-torch", "2.6", "--dtype", "bfloat16"), why="""
DDP skips the gradient all-reduce of accumulation steps inside `no_sync()`. FSDP2's equivalent is
`set_requires_gradient_sync(False)`: the backward then keeps unsharded gradients and skips the
reduce-scatter; setting it back to True makes the next backward reduce the accumulated gradients.""",
     before="""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def train_one_epoch(model, optimizer, scaler, loader, accum):
    for i, (x, y) in enumerate(loader):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.mse_loss(model(x), y)
        if (i + 1) % accum:
            with model.no_sync():
                loss.backward()
        else:
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()


dist.init_process_group("nccl")
model = torch.nn.Linear(4, 4).cuda()
model = DDP(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    train_one_epoch(model, optimizer, None, [], 2)""",
     after="""
import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard


def train_one_epoch(model, optimizer, scaler, loader, accum):
    for i, (x, y) in enumerate(loader):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.mse_loss(model(x), y)
        if (i + 1) % accum:
            model.set_requires_gradient_sync(False)
            loss.backward()
            model.set_requires_gradient_sync(True)
        else:
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()


dist.init_process_group("nccl")
model = torch.nn.Linear(4, 4).cuda()
mp_policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
fully_shard(model, mp_policy=mp_policy)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    train_one_epoch(model, optimizer, None, [], 2)""")

rule("A2A806", "fsdp2-checkpoint-state-dict", "model/optimizer `state_dict()`/`load_state_dict()` -> `torch.distributed.checkpoint.state_dict`",
     fixes=True, severity=FIX,
     flags=("--target", "fsdp2", "--min-torch", "2.6"), why="""
An FSDP2 model's `state_dict()` holds sharded DTensors, and its optimizer's state is sharded too. The
save and load sites of the function that shards the model use
`get_model_state_dict`/`get_optimizer_state_dict` and `set_model_state_dict`/`set_optimizer_state_dict`
with `StateDictOptions(full_state_dict=True)`: every rank gets (or gives) the full, unsharded state, so
checkpoints keep their old layout and old checkpoints still load. These calls are collectives: a
state gathered under a rank guard (`if rank == 0:`) is gathered just before the guard, on every rank.""",
     before="""
import torch
import torch.distributed as dist
from apex import amp
from apex.parallel import DistributedDataParallel as DDP

from net import Net


def main(args):
    dist.init_process_group("nccl", init_method="env://")
    torch.cuda.set_device(args.local_rank)
    model = Net().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    if args.resume:
        ckpt = torch.load(args.resume, map_location="cpu")
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        amp.load_state_dict(ckpt["amp"])
    model = DDP(model, delay_allreduce=True)
    for x, y in args.data:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()
    if args.local_rank == 0:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "amp": amp.state_dict()}, "ck.pt")""",
     after="""
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict, get_optimizer_state_dict,
                                                     set_model_state_dict, set_optimizer_state_dict)
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from net import Net


def main(args):
    dist.init_process_group("nccl", init_method="env://")
    torch.cuda.set_device(args.local_rank)
    model = Net().cuda()
    scaler = torch.amp.GradScaler("cuda")
    mp_policy = MixedPrecisionPolicy(param_dtype=torch.float16, reduce_dtype=torch.float32)
    fully_shard(model, mp_policy=mp_policy)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    if args.resume:
        ckpt = torch.load(args.resume, map_location="cpu")
        set_model_state_dict(model, ckpt["model"], options=StateDictOptions(full_state_dict=True))
        set_optimizer_state_dict(model, optimizer, ckpt["optimizer"], options=StateDictOptions(full_state_dict=True))
        scaler.load_state_dict(ckpt["amp"])
    for x, y in args.data:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    model_state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    optimizer_state = get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True))
    if args.local_rank == 0:
        torch.save({"model": model_state, "optimizer": optimizer_state, "amp": scaler.state_dict()}, "ck.pt")""")

rule("A2A807", "fsdp2-checkpoint-unrecognised", "checkpoint of the sharded model not recognised: migrate it to `torch.distributed.checkpoint.state_dict` by hand",
     fixes=False, severity=WARNING,
     flags=("--target", "fsdp2", "--min-torch", "2.6"), why="""
A `state_dict()` or `load_state_dict()` of the model or optimizer outside the function that shards it
(a `save_checkpoint(model, optimizer)` helper), or in a shape the rewrite does not know, would save
shards or load into sharded parameters. Where it is in the sharding function the file is left as it is;
elsewhere the finding marks the site. Use `get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))`
and its optimizer and `set_*` twins (they are collectives: call them on every rank).""",
     before="""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main(args, model):
    dist.init_process_group("nccl")
    model = DDP(model, device_ids=[args.gpu])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    if args.rank == 0 and args.resume:
        model.module.load_state_dict(torch.load(args.resume)["model"])
    scaler = torch.amp.GradScaler("cuda")
    for x in args.data:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()""",
     after="""
# A2A807 at model.state_dict()""")

rule("A2A808", "fsdp2-wrap-unrecognised", "DDP wrap or its training code not in a shape the fsdp2 target handles: code left as it is",
     fixes=False, severity=WARNING,
     flags=("--target", "fsdp2", "--min-torch", "2.6"), why="""
The fsdp2 rewrite handles `model = DDP(model, device_ids=..., output_device=..., broadcast_buffers=False, ...)`
(and drops `find_unused_parameters`, `gradient_as_bucket_view`, `static_graph`, `bucket_cap_mb`: FSDP2 has no buckets)
as a statement, one wrap per file, with apex fully migrated, one autocast dtype, and `no_sync()` only as
`with model.no_sync():`. Anything else (a wrap inside an expression, other DDP options such as
`process_group` (FSDP2 takes a device mesh), apex still in use, several wraps) is left as it is for a person to shard.""",
     before="""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main(args, model):
    dist.init_process_group("nccl")
    group = dist.new_group(args.ranks)
    model = DDP(model, device_ids=[args.gpu], process_group=group)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda")
    for x in args.data:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()""",
     after="""
# unchanged: A2A808 at the wrap""")

rule("A2A809", "ddp-module-attribute", "`model.module` of the DDP wrapper -> `model` (an FSDP2 model is the module itself)",
     fixes=True, severity=INFO,
     flags=("--target", "fsdp2", "--min-torch", "2.6"), why="""
DDP wraps the model, so code reaches the user's module as `model.module`. `fully_shard` changes the
model in place and returns it: there is no `.module` attribute any more. In the function that shards the
model, `model.module` after the wrap becomes `model`.""",
     before="""
import os

import torch
import torch.nn as nn
from torch.distributed import init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(32, 32), nn.Linear(32, 32), nn.Linear(32, 32))

    def forward(self, x):
        return self.layers(x)


def run(loader, epochs):
    rank = int(os.environ["LOCAL_RANK"])
    init_process_group("nccl")
    model = Stack()
    ddp_model = DDP(model.to(rank), device_ids=[rank])
    optimizer = torch.optim.Adam(ddp_model.parameters())
    for _ in range(epochs):
        for x, y in loader:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = nn.functional.mse_loss(ddp_model(x.to(rank)), y.to(rank))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return ddp_model.module""",
     after="""
import os

import torch
import torch.nn as nn
from torch.distributed import init_process_group
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(32, 32), nn.Linear(32, 32), nn.Linear(32, 32))

    def forward(self, x):
        return self.layers(x)


def run(loader, epochs):
    rank = int(os.environ["LOCAL_RANK"])
    init_process_group("nccl")
    model = Stack()
    mp_policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    ddp_model = model.to(rank)
    for block in ddp_model.layers:
        fully_shard(block, mp_policy=mp_policy)
    fully_shard(ddp_model, mp_policy=mp_policy)
    optimizer = torch.optim.Adam(ddp_model.parameters())
    for _ in range(epochs):
        for x, y in loader:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = nn.functional.mse_loss(ddp_model(x.to(rank)), y.to(rank))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return ddp_model""")

CODES = tuple(f"A2A80{i}" for i in range(1, 10))
