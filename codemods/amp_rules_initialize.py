"""Rule codes of `amp.initialize`, `amp.scale_loss` and the autocast region (A2A1xx), with the text
`apex2amp explain` prints: the core rewrite, opt levels and options, several losses."""
from __future__ import annotations

from .base import FIX, INFO, WARNING, rule

INITIALIZE = rule(
    "A2A101", "amp-initialize-to-grad-scaler", "`amp.initialize(...)` -> `torch.amp.GradScaler(...)` (fp32 model)",
    fixes=True, severity=FIX,
    why="""
apex.amp is gone from apex (removed in 25.07). Native AMP keeps the model in fp32 and puts forward and
loss under `torch.autocast`; a `GradScaler` does the loss scaling. The call is deleted, a scaler is
created in its place with `enabled=` set from the condition that guarded apex (`args.fp16`,
`opt_level != "O0"`, `enabled=`), so that one code path serves both settings. With `--dtype bfloat16`
no scaler is created. Several calls one after the other in one block, one per model / optimizer pair
with the same options, make one GradScaler (apex's calls shared one loss scaler). Without optimizers
the model's forward runs under autocast (`autocast_forward`); at O3 the model is cast with `.half()`
and its forward patched as apex did (inputs fp16, outputs fp32; `half_forward`).""",
    before="""
import torch
from apex import amp


def train(args, model, optimizer, loader):
    model, optimizer = amp.initialize(model, optimizer, opt_level=args.opt_level)
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()""",
    after="""
import torch


def train(args, model, optimizer, loader):
    scaler = torch.amp.GradScaler("cuda", enabled=args.opt_level != "O0")
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16, enabled=args.opt_level != "O0"):
            loss = torch.nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()""")


SCALE_LOSS = rule(
    "A2A102", "scale-loss-to-scaler-scale", "`with amp.scale_loss(loss, opt) as s: s.backward()` -> `scaler.scale(loss).backward()`",
    fixes=True, severity=FIX,
    why="""
`scaler.scale(loss)` multiplies the loss by the current scale. Unlike apex, gradients stay scaled after
the backward until `scaler.unscale_(opt)` or `scaler.step(opt)`. `delay_unscale` and
`delay_overflow_check` are dropped: accumulation works by stepping only at the boundary. `loss_id`
is dropped too, except with `num_losses` > 1, where each loss keeps its own scaler (A2A140).
`if fp16: <apex backward> else: loss.backward()` collapses to the scaler line
(a disabled scaler returns the loss unchanged).""",
    before="""
import torch
from apex import amp


def train(args, model, optimizer, loader):
    if args.fp16:
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        if args.fp16:
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
        else:
            loss.backward()
        optimizer.step()""",
    after="""
import torch


def train(args, model, optimizer, loader):
    scaler = torch.amp.GradScaler("cuda", enabled=bool(args.fp16))
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16, enabled=bool(args.fp16)):
            loss = torch.nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()""")


AUTOCAST = rule(
    "A2A104", "autocast-region", "forward and loss wrapped in `torch.autocast(...)` (backward outside)",
    fixes=True, severity=FIX,
    why="""
apex O1 patched torch functions globally; native autocast is a region. The statements from the model
call to the statement that computes the loss are wrapped; the backward and the step stay outside, as
the PyTorch AMP examples do. apex's global effects outside that region (e.g. `.cpu()` upcasting in
metric code) are not reproduced.""",
    before="""
import torch
from apex import amp


def train(model, optimizer, loader, criterion):
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    for images, target in loader:
        output = model(images)
        loss = criterion(output, target)
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()""",
    after="""
import torch


def train(model, optimizer, loader, criterion):
    scaler = torch.amp.GradScaler("cuda")
    for images, target in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            output = model(images)
            loss = criterion(output, target)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()""")


OPT_LEVEL = rule(
    "A2A108", "opt-level-o2-o3-changed", "O2/O3 become fp32 weights + autocast: numerics and memory change",
    fixes=False, severity=INFO,
    why="""
O2 ran everything but BatchNorm in fp16 with fp32 master weights; O3 was pure fp16. GradScaler refuses
fp16 gradients, so the native recipe keeps fp32 parameters and runs eligible ops in fp16 under
autocast; softmax, norms and losses stay fp32. Expect slightly different numerics and more weight
memory. The native analogue of O2 for sharded training is FSDP's MixedPrecision.

Under `--target fsdp2` (A2A801) the model is sharded with `fully_shard(..., mp_policy=MixedPrecisionPolicy(
param_dtype=..., reduce_dtype=torch.float32))`: the forward and backward compute with `param_dtype`
parameters while the sharded fp32 parameters are the master copy, which is apex O2's recipe at a fraction
of the memory per rank. A file the fsdp2 target leaves unsharded (an A2A8xx finding says why) keeps fp32
weights under autocast as above.""",
    before="""
import torch
from apex import amp


def train(model, optimizer, loader):
    model, optimizer = amp.initialize(model, optimizer, opt_level="O2")
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()""",
    after="""
import torch


def train(model, optimizer, loader):
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()""")


STATIC_SCALE = rule(
    "A2A109", "static-loss-scale", "a static or configured `loss_scale` has no exact GradScaler equivalent",
    fixes=False, severity=WARNING,
    why="""
apex's static loss scale never skips a step, even with inf gradients; GradScaler always skips on
inf/NaN. The closest is `GradScaler("cuda", init_scale=S, growth_interval=2**30)`. A value read from
configuration (`args.loss_scale`) may be "dynamic" or a number: the rewrite keeps GradScaler's dynamic
defaults (the same as apex's), so check the setting.""",
    before="""
import torch
from apex import amp


def train(model, optimizer, loader):
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1", loss_scale=128.0)
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()""",
    after="""
import torch


def train(model, optimizer, loader):
    scaler = torch.amp.GradScaler("cuda", init_scale=128.0, growth_interval=2**30)
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()""")


NO_REGION = rule(
    "A2A116", "autocast-region-not-found", "forward pass not found next to the backward: the module's amp code is left as it is",
    fixes=False, severity=WARNING,
    why="""
The loss could not be traced to a forward pass before the backward in the same function (a call of
the amp model, of a model passed in as a parameter, or of a `self.<attr>`), or the range holds
statements that must stay outside autocast, and no caller in the module passes the loss in. A
region around the loss alone, or none, would train the mixed-precision mode in fp32 behind a
GradScaler, so the module's amp code is left as it is (with a backward helper whose callers are all
in other files, too). Put the forward next to the loss, or add the region by hand.""",
    before="""
import torch
from apex import amp


class Trainer:
    def setup(self, model, optimizer):
        self.model, self.optimizer = amp.initialize(model, optimizer, opt_level="O1")

    def step(self):
        loss = self.loss  # computed elsewhere
        with amp.scale_loss(loss, self.optimizer) as scaled_loss:
            scaled_loss.backward()
        self.optimizer.step()""",
    after="""
with torch.autocast("cuda", dtype=torch.float16):
    ...  # forward + loss, where they are computed""")


UNSUPPORTED = rule(
    "A2A117", "amp-shape-unsupported", "apex amp call in a shape the rewriter does not migrate safely",
    fixes=False, severity=WARNING,
    why="""
A wrong rewrite is worse than none: when `amp.initialize` returns into an unusual target, is called
with `*args` or from a class body, `scale_loss` is used outside a `with`, or code at module level
would need a scaler that no `amp.initialize` in the module creates (it runs in another module), the
module's amp code is left as it is and each site is reported. The same holds for a method of a
subclass of another package's class that nothing in the run calls (a framework hook such as mmcv's
`OptimizerHook.after_train_iter(runner)`: the framework passes no scaler), and for the inference form
at O3 with options that change what O3 does (`keep_batchnorm_fp32=`, `cast_model_type=`,
`cast_model_outputs=`, `enabled=`; plain O3 without optimizers becomes `model.half()` and apex's
forward patch, A2A101). Migrate by hand following
the target idiom (see `apex2amp explain A2A101`).""",
    before="""
from apex import amp


def setup(*parts):
    return amp.initialize(*parts)""",
    after="""
scaler = torch.amp.GradScaler("cuda")""")


OPTIONS = rule(
    "A2A119", "amp-initialize-option-dropped", "an `amp.initialize` option with no GradScaler equivalent was dropped",
    fixes=False, severity=WARNING,
    why="""
`min_loss_scale`/`max_loss_scale` have no GradScaler equivalent (emulate a cap with
`if scaler.get_scale() > M: scaler.update(new_scale=M)` after `update()`); `cast_model_outputs` becomes
`.to(dtype)` on the outputs.""",
    before="""
import torch
from apex import amp


def train(model, optimizer, loader):
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1", max_loss_scale=2.**16)
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()""",
    after="""
import torch


def train(model, optimizer, loader):
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()""")


PER_LOSS_SCALERS = rule(
    "A2A140", "one-grad-scaler-per-loss-id", "`num_losses=N` with `loss_id=k` -> one GradScaler per loss (`scalers[k]`)",
    fixes=True, severity=FIX,
    why="""
With `amp.initialize(..., num_losses=N)` apex kept N independent dynamic loss scalers: `scale_loss(loss,
opt, loss_id=k)` scaled by scaler k, and at its exit scaler k alone checked the gradients of `opt`,
halved its own scale (and skipped `opt`'s next step) on an overflow, and counted its own clean steps.
One shared GradScaler would halve every loss's scale when one overflows, and count its growth window
in iterations of the whole loop. So each loss gets its own GradScaler, `scalers[k]`: scaled for its loss,
stepping its own optimizers, updated once after their last step. Each optimizer must belong to one
loss_id (else A2A141).""",
    before="""
import torch
from apex import amp


def train(netG, netD, optG, optD, loader, criterion):
    [netG, netD], [optG, optD] = amp.initialize([netG, netD], [optG, optD], opt_level="O1", num_losses=2)
    for i, (real, z) in enumerate(loader):
        optD.zero_grad()
        fake = netG(z)
        errD = criterion(netD(real), 1.0) + criterion(netD(fake.detach()), 0.0)
        with amp.scale_loss(errD, optD, loss_id=0) as scaled:
            scaled.backward()
        optD.step()
        if i % 2 == 0:
            optG.zero_grad()
            errG = criterion(netD(fake), 1.0)
            with amp.scale_loss(errG, optG, loss_id=1) as scaled:
                scaled.backward()
            optG.step()""",
    after="""
import torch


def train(netG, netD, optG, optD, loader, criterion):
    scalers = [torch.amp.GradScaler("cuda") for _ in range(2)]
    for i, (real, z) in enumerate(loader):
        optD.zero_grad()
        with torch.autocast("cuda", dtype=torch.float16):
            fake = netG(z)
            errD = criterion(netD(real), 1.0) + criterion(netD(fake.detach()), 0.0)
        scalers[0].scale(errD).backward()
        scalers[0].step(optD)
        scalers[0].update()
        if i % 2 == 0:
            optG.zero_grad()
            with torch.autocast("cuda", dtype=torch.float16):
                errG = criterion(netD(fake), 1.0)
            scalers[1].scale(errG).backward()
            scalers[1].step(optG)
            scalers[1].update()""")


PER_LOSS_UNSUPPORTED = rule(
    "A2A141", "loss-id-shape-unsupported", "several apex loss scalers in a shape that cannot be mapped to GradScalers safely",
    fixes=False, severity=WARNING,
    why="""
apex's `loss_id` picks one of `num_losses` loss scalers. The migration maps each to its own GradScaler
only when that mapping is provably the same: `num_losses` and every `loss_id` are integer literals,
every optimizer belongs to one loss_id, the optimizers of one loss step together, and no apex state
dict (one entry per scaler) or cross-module scaler is involved. Otherwise the module's amp code is left
as it is: give each loss its own `torch.amp.GradScaler`, scale its loss with it, step its optimizers
with it and call its `update()` after them. Where one optimizer takes the gradients of several loss
ids (a loop or a dict lookup picking the id for one optimizer), apex unscaled each loss's gradients with
its own scale before they summed, which one GradScaler per loss cannot do: if per-loss scaling is not
needed, drop `num_losses` and `loss_id` and use one GradScaler.""",
    before="""
import torch
from apex import amp


def train(model, optimizers, loader, heads):
    model, optimizers = amp.initialize(model, optimizers, opt_level="O1", num_losses=len(heads))
    for batch in loader:
        out = model(batch["x"])
        for k, head in enumerate(heads):
            loss = head(out, batch["y"][k])
            with amp.scale_loss(loss, optimizers[k], loss_id=k) as scaled:
                scaled.backward(retain_graph=True)
            optimizers[k].step()""",
    after="""
scalers[i].scale(losses[i]).backward()
scalers[i].step(optimizers[i])
scalers[i].update()""")


LOSS_IDS_ONE_SCALER = rule(
    "A2A184", "loss-ids-of-one-optimizer-share-a-scaler",
    "several apex loss ids feeding one optimizer -> one GradScaler (`num_losses`, `loss_id` dropped)",
    fixes=True, severity=FIX,
    why="""
apex's loss scalers only choose the factor each loss is multiplied by before its backward; the gradients
are unscaled before the step, and the scales are powers of two, so without an overflow the step is the
same whatever they are. When one optimizer takes the gradients of every loss id (the id picked per task
or per batch, `loss_id=task2scaler[name]`), a GradScaler per loss cannot step it, and one GradScaler is
PyTorch's recipe for several losses: a step with an overflow in any loss is skipped, as apex skipped it.
What changes is the scale after an overflow: halved for every loss, where apex halved only the
overflowing loss's, so the others run with a lower scale until it grows back. With `delay_unscale`, apex
summed gradients scaled by several losses' scales and unscaled the sum with one of them (wrong once they
differed); with one scale that sum is exact. Not applied when apex state dicts (one entry per loss
scaler) are saved or loaded, or a loss id is computed by a call.""",
    before="""
import torch
from apex import amp


def train(model, optimizer, loaders):
    task2id = {t: i for i, t in enumerate(loaders)}
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1", num_losses=len(task2id))
    for task, (x, y) in loaders.items():
        loss = model(x, y, task=task)
        with amp.scale_loss(loss, optimizer, loss_id=task2id[task]) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()
        optimizer.zero_grad()""",
    after="""
import torch


def train(model, optimizer, loaders):
    task2id = {t: i for i, t in enumerate(loaders)}
    scaler = torch.amp.GradScaler("cuda")
    for task, (x, y) in loaders.items():
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x, y, task=task)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()""")


REGION_OUTSIDE_FORWARD = rule(
    "A2A142", "autocast-region-cannot-cover-forward", "the loss comes from a forward pass the autocast region cannot cover",
    fixes=False, severity=WARNING,
    why="""
The autocast region must start at the forward pass the loss is computed from; wrapping only the loss
would leave the model in fp32 while a GradScaler scales it (apex O1 ran the forward in fp16). When the
forward runs in another function of this module, or before a loop/`if` boundary or a backward/step
the region may not cross, no correct region exists, so the module's amp code is left as it is. Move the
forward next to the loss (or put `with torch.autocast(...)` around the forward and the loss by hand).""",
    before="""
import torch
from apex import amp


def train(model, optimizer, loader, criterion, heads):
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    for images, targets in loader:
        outputs = model(images)
        for k in range(heads):
            loss = criterion(outputs[k], targets[k])
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward(retain_graph=True)
        optimizer.step()""",
    after="""
with torch.autocast("cuda", dtype=torch.float16):
    outputs = model(images)
for k in range(heads):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = criterion(outputs[k], targets[k])
    scaler.scale(loss).backward(retain_graph=True)""")


BF16_SWITCH_NOT_REACHED = rule(
    "A2A174", "bf16-switch-not-reached", "with `--dtype bfloat16` the amp on/off switch of another module's `amp.initialize` cannot reach this region",
    fixes=False, severity=WARNING,
    flags=("--dtype", "bfloat16"), why="""
With float16 the switch of a conditional `amp.initialize` (`opt_level = "O1" if fp16 else "O0"`) reaches
the autocast region in another module through the scaler (`enabled=scaler.is_enabled()`). With
bfloat16 there is no scaler, and this module holds no `amp.initialize` of its own: an autocast written
here without `enabled=` would train the fp32 mode in bf16. The module's amp code (and the
`amp.initialize` of the modules that call it) is left as it is: pass the switch by hand
(`do_train(..., amp_enabled=...)` and `torch.autocast(..., enabled=amp_enabled)`), or rerun with float16.""",
    before="""
# file: train_net.py
import torch
from apex import amp

from engine.trainer import run_epochs


def main(args, model, loader):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    opt_level = "O1" if args.mixed else "O0"
    model, optimizer = amp.initialize(model, optimizer, opt_level=opt_level)
    run_epochs(model, optimizer, loader, epochs=1)

# file: engine/__init__.py

# file: engine/trainer.py
import torch
from apex import amp


def run_epochs(model, optimizer, loader, epochs):
    for _ in range(epochs):
        for inputs, target in loader:
            loss = torch.nn.functional.l1_loss(model(inputs), target)
            optimizer.zero_grad()
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
            optimizer.step()""",
    after="""
""")
