"""Rule codes of the optimizer step, unscaling and clipping, and apex's scale and cast helpers (A2A1xx),
with the text `apex2amp explain` prints."""
from __future__ import annotations

from .base import FIX, WARNING, rule

STEP = rule(
    "A2A103", "optimizer-step-to-scaler-step", "`optimizer.step()` on an amp optimizer -> `scaler.step(optimizer)` + one `scaler.update()`",
    fixes=True, severity=FIX,
    why="""
apex skipped the step after an overflow by patching `optimizer.step`. `scaler.step(opt)` unscales (if
not done yet), skips the step on inf/NaN gradients, and `scaler.update()` adjusts the scale once per
iteration, after the last step. Steps under an accumulation condition keep their condition. When the
step cannot be found next to the backward, this rule reports instead.""",
    before="""
import torch
from apex import amp


def train(model, optimizer, loader):
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()
        optimizer.zero_grad()""",
    after="""
import torch


def train(model, optimizer, loader):
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()""")


UNSCALE = rule(
    "A2A105", "master-params-clip-to-unscale", "clipping after the backward gets `scaler.unscale_(opt)` first; `amp.master_params(opt)` -> the optimizer's params",
    fixes=True, severity=FIX,
    why="""
apex unscaled gradients when `scale_loss` exited, so clipping right after it saw true gradients. Native
gradients stay scaled until `scaler.unscale_(opt)`; clipping scaled gradients shrinks the effective
clip value by the scale (65536). `unscale_` is inserted once per optimizer and step: right after the
backward when the step follows in the same iteration (where apex unscaled), or at the start of the
accumulation boundary block; after an early exit (`if not boundary: continue` / `return`), right
before the clip, so micro-batches that do not step never unscale. Any call that reads `amp.master_params(opt)` (grad-norm logging) counts as
a gradient reader too. With an fp32 model the master params are the model's params.""",
    before="""
import torch
from apex import amp


def train(model, optimizer, loader, max_norm):
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        torch.nn.utils.clip_grad_norm_(amp.master_params(optimizer), max_norm)
        optimizer.step()""",
    after="""
import torch


def train(model, optimizer, loader, max_norm):
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_((p for g in optimizer.param_groups for p in g["params"]), max_norm)
        scaler.step(optimizer)
        scaler.update()""")


GET_SCALE = rule(
    "A2A112", "amp-state-loss-scale-to-get-scale", "`_amp_state.loss_scalers[i].loss_scale()` -> `scaler.get_scale()`",
    fixes=True, severity=FIX,
    why="""
The private apex loss scaler state has a public native reader. `get_scale()` synchronises with the
GPU; call it only for logging.""",
    before="""
import torch
from apex import amp


def train(model, optimizer, loader, log):
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()
        log(amp._amp_state.loss_scalers[0].loss_scale())""",
    after="""
import torch


def train(model, optimizer, loader, log):
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        log(scaler.get_scale())""")


DISABLE_CASTS = rule(
    "A2A113", "disable-casts-to-autocast-disabled", "`amp.disable_casts()` -> `torch.autocast(\"cuda\", enabled=False)`",
    fixes=True, severity=FIX,
    why="""
Inside the region ops run in their inputs' dtypes. Inputs produced under autocast may be fp16: add
`.float()` where fp32 is required.""",
    before="""
import torch
from apex import amp


def train(model, optimizer, loader, fn):
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    for x, y in loader:
        out = model(x)
        with amp.disable_casts():
            z = fn(out)
        loss = torch.nn.functional.mse_loss(z, y)
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()""",
    after="""
import torch


def train(model, optimizer, loader, fn):
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            out = model(x)
            with torch.autocast("cuda", enabled=False):
                z = fn(out)
            loss = torch.nn.functional.mse_loss(z, y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()""")


REGISTER = rule(
    "A2A114", "amp-function-registration", "`amp.register_*_function` / `@amp.half_function` etc. have no autocast registry",
    fixes=False, severity=WARNING,
    why="""
Autocast has no user registry. For a `torch.autograd.Function` use
`@torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)`; for a plain function run it
under `torch.autocast("cuda", enabled=False)` with `.float()` inputs. `register_float_function(torch,
"sigmoid")` for BCE: use `BCEWithLogitsLoss` instead.""",
    before="""
import torch
from apex import amp

amp.register_float_function(torch, "sigmoid")""",
    after="""
criterion = torch.nn.BCEWithLogitsLoss()  # instead of sigmoid + BCELoss""")


INTERNALS = rule(
    "A2A115", "apex-amp-internals", "apex amp internals or the old `amp.init` API: migrate by hand",
    fixes=False, severity=WARNING,
    why="""
`_amp_state` internals, `optimizer._amp_stash`, `amp.init()`/`handle.scale_loss` have no native
equivalent. "Was the step skipped": compare `scaler.get_scale()` before and after `scaler.update()`.""",
    before="""
import torch
from apex import amp


def train(model, optimizer, loader):
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    skipped = 0
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()
        if amp._amp_state.loss_scalers[0]._unskipped == 0:
            skipped += 1""",
    after="""
before = scaler.get_scale(); scaler.update()
if scaler.get_scale() < before:
    skipped += 1""")


CLIP_ELSEWHERE = rule(
    "A2A122", "clip-not-before-step", "gradient clipping not in the same step window as the optimizer step",
    fixes=False, severity=WARNING,
    why="""
`scaler.unscale_(opt)` may be called once per `update()`. A clip before a loop that steps several
optimizers (`for o in optimizers: o.step()`) when the clip names none of them would clip scaled
gradients: unscale each optimizer (`for o in optimizers: scaler.unscale_(o)`) before it. A clip on
every micro-batch while the step runs only at the accumulation boundary is kept in place by A2A148
when it is a torch clip with a plain threshold; any other clip there (a helper of your own, a path
that leaves before the step) must move next to the step, after `scaler.unscale_(opt)`.""",
    before="""
import torch
from apex import amp


def train(model, optimizers, loader, max_norm):
    model, optimizers = amp.initialize(model, optimizers, opt_level="O1")
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        with amp.scale_loss(loss, optimizers) as scaled_loss:
            scaled_loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        for opt in optimizers:
            opt.step()
            opt.zero_grad()""",
    after="""
scaler.scale(loss).backward()
for opt in optimizers:
    scaler.unscale_(opt)
torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
for opt in optimizers:
    scaler.step(opt)
scaler.update()""")


STEP_MISSING = rule(
    "A2A124", "optimizer-step-not-found", "the amp optimizer's step is not in this module: use `scaler.step` + `scaler.update` there",
    fixes=False, severity=WARNING,
    why="""
The backward is migrated here, but the optimizer's `step()` lives elsewhere (a trainer class, a
framework hook). Stepping with scaled gradients would multiply the update by the loss scale: replace
that call with `scaler.step(optimizer)` followed by `scaler.update()`. When a module only calls
`amp.initialize` (no backward, no step, no function of the run that takes the scaler), the training
step lives in code this run does not rewrite and still needs amp's state: the initialize stays as it
is, reported here, until the two are migrated together.""",
    before="""
import torch
from apex import amp


def train(model, optimizer, loader, engine):
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    engine.run(model, optimizer, loader)""",
    after="""
self.scaler.step(self.optimizer)
self.scaler.update()""")


# a clip after every micro-batch's backward, the step at the accumulation boundary: the shape of A2A145 and A2A148
ACCUM_CLIP_BEFORE = """
import torch
from apex import amp
from torch.nn.utils import clip_grad_norm_


def train(model, optimizer, loader, accum):
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    for i, (x, y) in enumerate(loader):
        loss = torch.nn.functional.mse_loss(model(x), y)
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        clip_grad_norm_(model.parameters(), 1.0)
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()"""


CLIP_AT_BOUNDARY = rule(
    "A2A145", "clip-moved-to-accumulation-boundary",
    "unsafe fix: a clip on every micro-batch moves to the accumulation boundary, after `scaler.unscale_(opt)`",
    fixes=True, severity=WARNING, unsafe=True,
    why="""
apex unscaled the gradients on every `scale_loss` exit, so a clip after each micro-batch's backward saw
unscaled, partially accumulated gradients and clipped each partial sum. `GradScaler.unscale_(opt)` may
run only once per step, so the migration moves the clip to the accumulation boundary, after
`scaler.unscale_(opt)` and before `scaler.step(opt)`. Numerically this is a change: the clip sees the
whole accumulated gradient once per step instead of clipping the partial sums after every micro-batch
(the two agree while no partial sum's norm exceeds max_norm). That makes it an unsafe fix: by default
the clip stays in place with its threshold times the scale (A2A148) where that fix applies, else the
module is left as it is and the finding says "unsafe fix available: --unsafe-fixes"; with
`--unsafe-fixes` (or `unsafe-fixes = true` in `[tool.apex2amp]`) the move is made. Check the pair with
`apex2amp verify`: it compares it with the fidelity tolerance.""",
    before=ACCUM_CLIP_BEFORE,
    after="""
import torch
from torch.nn.utils import clip_grad_norm_


def train(model, optimizer, loader, accum):
    scaler = torch.amp.GradScaler("cuda")
    for i, (x, y) in enumerate(loader):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        if (i + 1) % accum == 0:
            scaler.unscale_(optimizer)
            clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()""")


CLIP_SCALED = rule(
    "A2A148", "clip-kept-on-scaled-gradients",
    "a clip on every micro-batch stays in place, its threshold times `scaler.get_scale()` (apex's clip)",
    fixes=True, severity=FIX,
    why="""
apex unscaled the gradients on every `scale_loss` exit, so with gradient accumulation a clip after each
micro-batch's backward clipped the unscaled partial sum in place. GradScaler's scale only changes at
`scaler.update()`, after the step, so it is the same for every micro-batch of one step: the gradients hold
scale x the partial sum, and `clip_grad_norm_(params, max_norm * scaler.get_scale())` (or
`clip_grad_value_(params, clip_value * scaler.get_scale())`) clips them as apex did; `scaler.step`
unscales once at the boundary. The scale is a power of two, so the one difference is the 1e-6 torch adds
to the norm in the clip coefficient: on scaled gradients it weighs 1/scale as much (the coefficient moves
by about 1e-6 / norm), and `verify` compares such pairs with the fidelity tolerance. A used norm is divided by the scale again. `get_scale()` is 1.0 with the
scaler disabled. This is the default; `--unsafe-fixes` instead moves the clip to the boundary (A2A145).""",
    before=ACCUM_CLIP_BEFORE,
    after="""
import torch
from torch.nn.utils import clip_grad_norm_


def train(model, optimizer, loader, accum):
    scaler = torch.amp.GradScaler("cuda")
    for i, (x, y) in enumerate(loader):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        clip_grad_norm_(model.parameters(), 1.0 * scaler.get_scale())
        if (i + 1) % accum == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()""")
