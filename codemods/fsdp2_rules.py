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
     why="""
FSDP2 saves memory by sharding each transformer block (or other repeated layer) on its own, so that
only one block's parameters are gathered at a time. When the model's class is not in this file, or
its `__init__` assigns no `nn.ModuleList`/`nn.Sequential` of repeated layers, only the root gets
`fully_shard`: correct, but the whole model is gathered at once. Add `fully_shard(block, mp_policy=...)`
for each block before the root call.""",
     before="""
model = build_model(cfg)
model = DDP(model)""",
     after="""
mp_policy = MixedPrecisionPolicy(param_dtype=torch.float16, reduce_dtype=torch.float32)
# A2A803: add `fully_shard(block, mp_policy=mp_policy)` for each repeated block here
fully_shard(model, mp_policy=mp_policy)""")

rule("A2A804", "fsdp2-optimizer-before-wrap", "optimizer built before the wrap and not movable after it: code left as it is",
     fixes=False, severity=WARNING,
     why="""
`fully_shard` replaces the model's parameters with sharded DTensors: an optimizer built before it holds
the old, unsharded tensors and would train nothing. The construction moves after the sharding when it
sits in the same block as the wrap and nothing in between reads the optimizer or changes what it is
built from. Otherwise the file is left as it is: build the optimizer after `fully_shard` by hand.""",
     before="""
if args.sgd:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model = DDP(model)""",
     after="""
# unchanged: A2A804 at the optimizer""")

rule("A2A805", "no-sync-to-set-requires-gradient-sync", "`with model.no_sync():` -> `model.set_requires_gradient_sync(False)` ... `(True)`",
     fixes=True, severity=FIX,
     why="""
DDP skips the gradient all-reduce of accumulation steps inside `no_sync()`. FSDP2's equivalent is
`set_requires_gradient_sync(False)`: the backward then keeps unsharded gradients and skips the
reduce-scatter; setting it back to True makes the next backward reduce the accumulated gradients.""",
     before="""
with model.no_sync():
    scaler.scale(loss).backward()""",
     after="""
model.set_requires_gradient_sync(False)
scaler.scale(loss).backward()
model.set_requires_gradient_sync(True)""")

rule("A2A806", "fsdp2-checkpoint-state-dict", "model/optimizer `state_dict()`/`load_state_dict()` -> `torch.distributed.checkpoint.state_dict`",
     fixes=True, severity=FIX,
     why="""
An FSDP2 model's `state_dict()` holds sharded DTensors, and its optimizer's state is sharded too. The
save and load sites of the function that shards the model use
`get_model_state_dict`/`get_optimizer_state_dict` and `set_model_state_dict`/`set_optimizer_state_dict`
with `StateDictOptions(full_state_dict=True)`: every rank gets (or gives) the full, unsharded state, so
checkpoints keep their old layout and old checkpoints still load. These calls are collectives: a
state gathered under a rank guard (`if rank == 0:`) is gathered just before the guard, on every rank.""",
     before="""
if rank == 0:
    torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict()}, path)""",
     after="""
model_state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
optimizer_state = get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True))
if rank == 0:
    torch.save({"model": model_state, "optimizer": optimizer_state}, path)""")

rule("A2A807", "fsdp2-checkpoint-unrecognised", "checkpoint of the sharded model not recognised: migrate it to `torch.distributed.checkpoint.state_dict` by hand",
     fixes=False, severity=WARNING,
     why="""
A `state_dict()` or `load_state_dict()` of the model or optimizer outside the function that shards it
(a `save_checkpoint(model, optimizer)` helper), or in a shape the rewrite does not know, would save
shards or load into sharded parameters. Where it is in the sharding function the file is left as it is;
elsewhere the finding marks the site. Use `get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))`
and its optimizer and `set_*` twins (they are collectives: call them on every rank).""",
     before="""
def save_checkpoint(model, optimizer, path):
    torch.save({"model": model.state_dict()}, path)""",
     after="""
# A2A807 at model.state_dict()""")

rule("A2A808", "fsdp2-wrap-unrecognised", "DDP wrap or its training code not in a shape the fsdp2 target handles: code left as it is",
     fixes=False, severity=WARNING,
     why="""
The fsdp2 rewrite handles `model = DDP(model, device_ids=..., output_device=..., broadcast_buffers=False, ...)`
(and drops `find_unused_parameters`, `gradient_as_bucket_view`, `static_graph`, `bucket_cap_mb`: FSDP2 has no buckets)
as a statement, one wrap per file, with apex fully migrated, one autocast dtype, and `no_sync()` only as
`with model.no_sync():`. Anything else (a wrap inside an expression, other DDP options such as
`process_group` (FSDP2 takes a device mesh), apex still in use, several wraps) is left as it is for a person to shard.""",
     before="""
model = DDP(model, process_group=group)""",
     after="""
# unchanged: A2A808 at the wrap""")

rule("A2A809", "ddp-module-attribute", "`model.module` of the DDP wrapper -> `model` (an FSDP2 model is the module itself)",
     fixes=True, severity=INFO,
     why="""
DDP wraps the model, so code reaches the user's module as `model.module`. `fully_shard` changes the
model in place and returns it: there is no `.module` attribute any more. In the function that shards the
model, `model.module` after the wrap becomes `model`.""",
     before="""
model = DDP(model)
torch.save(model.module.state_dict(), path)""",
     after="""
fully_shard(model, mp_policy=mp_policy)
torch.save(get_model_state_dict(model, options=StateDictOptions(full_state_dict=True)), path)""")

CODES = tuple(f"A2A80{i}" for i in range(1, 10))
