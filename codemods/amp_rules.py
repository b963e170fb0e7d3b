"""Rule codes of the apex.amp migration (A2A1xx), with the text `apex2amp explain` prints."""
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
no scaler is created.""",
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

STATE_DICT = rule(
    "A2A106", "amp-state-dict-to-scaler", "`amp.state_dict()` / `amp.load_state_dict(sd)` -> the scaler's",
    fixes=True, severity=FIX,
    why="""
The scaler's state (scale, growth tracker) belongs in checkpoints like apex's did. Where the helper
lives in another function or module, the scaler is passed in as a parameter and the call sites pass
`scaler=scaler`.""",
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
    torch.save({"model": model.state_dict(), "amp": amp.state_dict()}, "checkpoint.pt")""",
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
    torch.save({"model": model.state_dict(), "amp": scaler.state_dict()}, "checkpoint.pt")""")

OLD_CHECKPOINT = rule(
    "A2A107", "apex-checkpoint-load-site", "a load site may receive apex-format amp state from old checkpoints",
    fixes=False, severity=WARNING,
    why="""
Checkpoints written by apex hold `{"loss_scaler0": {"loss_scale": ..., "unskipped": ...}}`, which
`GradScaler.load_state_dict` rejects. Convert old files once with `apex2amp convert-checkpoint IN OUT`,
or convert at load time.""",
    before="""
scaler.load_state_dict(checkpoint["amp"])""",
    after="""
sd = checkpoint["amp"]
if "loss_scaler0" in sd:  # written by apex
    sd = {"scale": sd["loss_scaler0"]["loss_scale"], "growth_factor": 2.0, "backoff_factor": 0.5,
          "growth_interval": 2000, "_growth_tracker": sd["loss_scaler0"]["unskipped"]}
scaler.load_state_dict(sd)""")

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

APEX_IMPORT = rule(
    "A2A110", "apex-import-removed", "apex import removed (with its `try/except ImportError` guard and flags)",
    fixes=True, severity=FIX,
    why="""
After the migration the module no longer uses apex; its import (and the fallbacks `amp = None`,
`has_apex = False`, the asserts and flag checks that exist only for it) go, so the code runs without
apex installed. Every remaining read of a flag becomes `True`; a flag that cannot be folded safely
(rebound, deleted or named in a string) keeps its definition and an informational A2A110 says so.
Comments above a removed import move to the next statement.""",
    before="""
try:
    from apex import amp
except ImportError:
    amp = None""",
    after="")

APEX_BRANCH = rule(
    "A2A111", "apex-branch-removed", "apex branch beside an existing native-AMP branch removed",
    fixes=True, severity=FIX,
    why="""
Code that supports both apex and native AMP (`--amp apex|native`) keeps the native branch; the apex
branch goes. Where an `else` follows, selecting apex now takes it; where none does, the finding asks
for review: nothing in that chain runs for the apex setting any more, so select (and default to) the
native one.""",
    before="""
if args.amp == "apex":
    with amp.scale_loss(loss, optimizer) as scaled_loss:
        scaled_loss.backward()
elif args.amp == "native":
    scaler.scale(loss).backward()""",
    after="""
if args.amp == "native":
    scaler.scale(loss).backward()""")

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
at O3 (`amp.initialize(model, opt_level="O3")` without optimizers cast the whole model to fp16, which
an autocast forward cannot stand for: use `model.half()` or the O1 recipe). Migrate by hand following
the target idiom (see `apex2amp explain A2A101`).""",
    before="""
from apex import amp


def setup(*parts):
    return amp.initialize(*parts)""",
    after="""
scaler = torch.amp.GradScaler("cuda")""")

LEFTOVER = rule(
    "A2A118", "apex-still-used", "apex is still used here after the migration",
    fixes=False, severity=WARNING,
    why="""
Some apex use could not be migrated, so its import stays and the module still needs apex at run time.
The other findings on this file say what to do. An apex name that only a string annotation or a
`cast("Name", ...)` names (often imported under `if TYPE_CHECKING:`) also keeps its import: a type
checker reads it; change those annotations, then drop the import. An apex import nothing reads whose
flag skips tests (`pytest.mark.skipif(not HAS_APEX)`, `skipUnless`, `self.skipTest`) stays too: it checks
that apex is installed for code under test elsewhere, which may still need it; fold it by hand once
nothing does. An apex import nothing in its module reads stays as well when another file imports that
name from the module (a package `__init__.py` re-exporting `FusedAdam`, `from .modeling import
BertLayerNorm`): removing it would break that import; point the importer at the torch class first.""",
    before="""
from apex import amp


def setup(*parts):
    return amp.initialize(*parts)""",
    after="")

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

THREADED = rule(
    "A2A121", "scaler-threaded-through-calls", "the scaler is passed as a parameter to functions that need it",
    fixes=True, severity=FIX,
    why="""
The function that used the global apex state now needs the scaler object: it gets a `scaler`
parameter, and the call sites in this run pass `scaler=scaler`. Call sites outside the run must pass
it too.""",
    before="""
import torch
from apex import amp


def train_one_epoch(model, optimizer, loader):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()


def main(model, optimizer, loader):
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    train_one_epoch(model, optimizer, loader)""",
    after="""
import torch


def train_one_epoch(model, optimizer, loader, scaler):
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()


def main(model, optimizer, loader):
    scaler = torch.amp.GradScaler("cuda")
    train_one_epoch(model, optimizer, loader, scaler=scaler)""")

CLIP_ELSEWHERE = rule(
    "A2A122", "clip-not-before-step", "gradient clipping not in the same step window as the optimizer step",
    fixes=False, severity=WARNING,
    why="""
`scaler.unscale_(opt)` may be called once per `update()`. A clip that runs on every micro-batch while
the step runs only at the accumulation boundary cannot get it safely: move the clip next to the step
and call `scaler.unscale_(opt)` before it. The same goes for a clip before a loop that steps several
optimizers (`for o in optimizers: o.step()`) when the clip names none of them: unscale each optimizer
(`for o in optimizers: scaler.unscale_(o)`) before it.""",
    before="""
clip_grad_norm_(model.parameters(), 1.0)
if (i + 1) % accum == 0:
    optimizer.step()""",
    after="""
if (i + 1) % accum == 0:
    scaler.unscale_(optimizer)
    clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()""")

STAR_IMPORT = rule(
    "A2A123", "apex-star-import-used", "`from apex.fp16_utils import *` provides names still used here",
    fixes=False, severity=WARNING,
    why="""
The star import silently provides `to_python_float`, `network_to_half`, `FP16_Optimizer`...; removing it
would break those names. Replace each with its torch equivalent (`x.item()`, fp32 model + autocast +
GradScaler), then remove the import.""",
    before="""
from apex.fp16_utils import *
print(to_python_float(loss))""",
    after="""
print(loss.item())""")

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

SIGNATURE_KEPT = rule(
    "A2A126", "scaler-signature-not-changed", "the scaler would need a new parameter, but a caller could not be updated",
    fixes=False, severity=WARNING,
    why="""
A function that used apex's global state needs the GradScaler object. A new parameter is added only
when every call site is found in this run and passes it. A method called on an instance elsewhere
(`trainer.train(loader)` in another module), a function passed as a value (a callback, a hook,
`functools.partial(step_fn, ...)`, `Engine(update)`, a decorator that registers it, in this file or
imported into another file of the run and used there as a value) or one nothing in the run calls
would break its callers, so the module's amp code is left as it is. The same holds when a caller in
another file cannot pass the scaler because that file keeps its apex code (its `apex` is a local
apex.py, its amp migration is held back or refused) or has no amp code to make a scaler: the files of
one migration migrate together, and the modules importing the helper keep `amp.initialize`. Keep the scaler
where the code already reaches it: on the object (`self.scaler = scaler` in `__init__`, then
`self.scaler` in the method), or in the enclosing function (a closure), then rerun.""",
    before="""
class Trainer:
    def train(self, loader):
        ...
        with amp.scale_loss(loss, self.optimizer) as scaled:
            scaled.backward()
# experiment.py
trainer.train(loader)""",
    after="""
# unchanged: store the scaler on the Trainer (self.scaler) and migrate again""")

SCALER_CLOSURE = rule(
    "A2A127", "scaler-through-closure", "a nested function reads the scaler of its enclosing function",
    fixes=True, severity=FIX,
    why="""
A nested function (an ignite `update(engine, batch)`, a callback defined inside `main()`) sees the
names of the function around it: the scaler created there reaches it through the closure, so its
signature stays as its caller (often a framework) expects.""",
    before="""
import torch
from apex import amp


def main(model, optimizer, Engine):
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")

    def update(engine, batch):
        x, y = batch
        loss = torch.nn.functional.mse_loss(model(x), y)
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()

    return Engine(update)""",
    after="""
import torch


def main(model, optimizer, Engine):
    scaler = torch.amp.GradScaler("cuda")

    def update(engine, batch):
        x, y = batch
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    return Engine(update)""")

SCALER_ON_OBJECT = rule(
    "A2A128", "scaler-on-the-object", "a mixin or base class reads the scaler its subclass keeps on `self`",
    fixes=True, severity=FIX,
    why="""
Where `amp.initialize` stored the model and optimizer on `self`, the scaler lives on the object too
(`self.scaler`). The methods of the bases and mixins of that class in this run (a `backward(self,
loss)` in a mixin module) read `self.scaler` instead of taking a new parameter, so their callers stay
as they are. Every class that uses such a mixin must hold the scaler as well.""",
    before="""
class BackwardMixin:
    def backward(self, loss):
        with amp.scale_loss(loss, self.optimizer) as scaled:
            scaled.backward()""",
    after="""
class BackwardMixin:
    def backward(self, loss):
        self.scaler.scale(loss).backward()""")
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
[netG, netD], [optG, optD] = amp.initialize([netG, netD], [optG, optD], num_losses=2)
with amp.scale_loss(errD, optD, loss_id=0) as s:
    s.backward()
optD.step()
if i % 2 == 0:
    with amp.scale_loss(errG, optG, loss_id=1) as s:
        s.backward()
    optG.step()""",
    after="""
scalers = [torch.amp.GradScaler("cuda") for _ in range(2)]
scalers[0].scale(errD).backward()
scalers[0].step(optD)
scalers[0].update()
if i % 2 == 0:
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
with it and call its `update()` after them.""",
    before="""
with amp.scale_loss(losses[i], optimizers[i], loss_id=i) as s:
    s.backward()""",
    after="""
scalers[i].scale(losses[i]).backward()
scalers[i].step(optimizers[i])
scalers[i].update()""")

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
outputs = model(images)
for k in range(heads):
    loss = criterion(outputs[k], targets[k])
    with amp.scale_loss(loss, optimizer) as s:
        s.backward(retain_graph=True)""",
    after="""
with torch.autocast("cuda", dtype=torch.float16):
    outputs = model(images)
for k in range(heads):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = criterion(outputs[k], targets[k])
    scaler.scale(loss).backward(retain_graph=True)""")
APEX_SHADOWED = rule(
    "A2A160", "local-apex-shadows-apex", "`import apex` here reaches a local `apex.py`, not NVIDIA apex: left as it is",
    fixes=False, severity=WARNING,
    why="""
Python finds `apex` along sys.path, whose first entry is the folder of the script that was run (or the
working folder under `python -m`). A file `apex.py` in the folder a module is run or imported from
(its import root) is what `import apex` and `from apex import amp` give that module, so its `amp` is
whatever the local file defines, not NVIDIA apex's. Rewriting those names as apex's would change what
the code does; the module's apex code is left as it is. Modules that cannot reach the local file (they
run from another folder, or import it as `from .apex import x` / `from pkg.apex import x`) migrate as
usual. Rename the local file (e.g. `apex_utils.py`, and its imports), then rerun.""",
    before="""
# apex.py beside train.py defines its own `amp`
from apex import amp""",
    after="""
from apex import amp  # unchanged: it is the local apex.py""")

APEX_MAYBE_SHADOWED = rule(
    "A2A161", "local-apex-may-shadow-apex", "`import apex` here may reach a local `apex.py`, depending on how the module runs: left as it is",
    fixes=False, severity=WARNING,
    why="""
The module can be run or imported from more than one folder (a module inside a package that is also a
script: `python pkg/tool.py` puts pkg/ first on sys.path, `python -m pkg.tool` or an import from the
root does not), and only some of those folders hold a local `apex.py` that `import apex` would reach.
Which file `apex` is depends on how it is launched, so no rewrite is provably right: the module's apex
code is left as it is. Rename the local file, or settle on one way to run the module, then rerun.""",
    before="""
# pkg/apex.py exists; pkg/tool.py has `if __name__ == "__main__":`
from apex import amp""",
    after="""
from apex import amp  # unchanged: `python pkg/tool.py` would import pkg/apex.py""")

REINITIALIZE = rule(
    "A2A416", "amp-reinitialize-on-restore", "a second `amp.initialize` before `amp.load_state_dict` (restore) removed",
    fixes=True, severity=FIX,
    why="""
apex's restore recipe calls `amp.initialize` again on the model and optimizer it already returned, then
`amp.load_state_dict(...)`: the second call makes fresh loss scalers that the load overwrites. Native AMP
has one GradScaler, made where the first `amp.initialize` was and kept on `self`; the load restores its
state (`self.scaler.load_state_dict(...)`), so the second call goes. This applies when both calls are in
methods of one class, the second assigns the same `self` attributes from the same objects with the same
options, and its block goes on to `amp.load_state_dict`; other modules with several `amp.initialize`
calls are reported (A2A117).""",
    before="""
def restore(self, ckpt):
    self.model.load_state_dict(ckpt["model"])
    self.model, self.optimizer = amp.initialize(self.model, self.optimizer, opt_level=self.opt_level)
    amp.load_state_dict(ckpt["amp"])""",
    after="""
def restore(self, ckpt):
    self.model.load_state_dict(ckpt["model"])
    self.scaler.load_state_dict(ckpt["amp"])""")

UNSELECTABLE_APEX_MODE = rule(
    "A2A417", "apex-backend-unselectable", "`if self.backend == 'apex'` branches removed once nothing can set 'apex'",
    fixes=True, severity=FIX,
    why="""
A trainer picks its backend once (a torch-version gate with native, apex and fp32 branches) and keeps
the choice on the object, e.g. `self.backend = "apex"`. When the apex branch of that choice goes
because the native branch runs in its place (torch is new enough wherever the migrated code runs),
nothing sets the apex value any more, so the methods' `if self.backend == "apex":` branches are dead
and go with it; their native and fp32 branches stay unchanged, and the scaler stays where the native
branch keeps it (`self.scaler`). Applies only when every assignment of that attribute in the module is
a string literal.""",
    before="""
if self.backend == "apex":
    with amp.scale_loss(loss, self.optimizer) as scaled_loss:
        scaled_loss.backward()
else:
    loss.backward()""",
    after="""
loss.backward()""")

ENGINE_OVERRIDE = rule(
    "A2A418", "engine-step-override", "a base-class method that steps the amp optimizer -> an override on the apex engine",
    fixes=True, severity=FIX,
    why="""
Engine classes often come one per precision backend on a shared base (`Engine`, `ApexEngine(Engine)`,
`NativeEngine(Engine)`), and the base's `optimizer_step` calls `self.optimizer.step()` for all of them.
Only the apex engine has the GradScaler (kept on `self`), so the base method cannot use it. The apex
engine gets its own copy of that method with `scaler.step(optimizer)` and `scaler.update()`; the base
and the other backends keep theirs unchanged. Not done when the class already defines the method, or
the method is decorated, calls `super()` or reads private `__names`.""",
    before="""
class Engine:
    def optimizer_step(self):
        self.optimizer.step()

class ApexEngine(Engine):
    ...""",
    after="""
class Engine:
    def optimizer_step(self):
        self.optimizer.step()

class ApexEngine(Engine):
    ...
    def optimizer_step(self):
        self.grad_scaler.step(self.optimizer)
        self.grad_scaler.update()""")
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
the module is left as it is and the finding says "unsafe fix available: --unsafe-fixes"; with
`--unsafe-fixes` (or `unsafe-fixes = true` in `[tool.apex2amp]`) the move is made. Check the pair with
`apex2amp verify`: it compares it with the fidelity tolerance.""",
    before="""
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
            optimizer.zero_grad()""",
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

BACKWARD_HELPER = rule(
    "A2A147", "backward-helper-across-modules",
    "a backward helper holding `amp.scale_loss` (`def backward(loss, optimizer, args)`) -> `scaler.scale(loss)"
    ".backward()`; its callers in other modules step with the scaler",
    fixes=True, severity=FIX,
    why="""
A helper such as `def backward(loss, optimizer, args)` in utils.py holds `amp.scale_loss`, while the clip
and `optimizer.step()` live in the caller's loop in train.py, where `amp.initialize` is. Both modules
migrate together: the helper takes the scaler (`scaler.scale(loss).backward()`), train.py creates the
scaler where `amp.initialize` was, passes it to the helper, runs the forward and the loss it passes under
`torch.autocast`, calls `scaler.unscale_(optimizer)` before the clip, and steps with `scaler.step` +
`scaler.update`.""",
    before="""
# utils.py
def backward(loss, optimizer, args):
    if args.fp16:
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
    else:
        loss.backward()
# train.py
loss = criterion(model(x), y)
backward(loss, optimizer, cfg)
clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
optimizer.step()""",
    after="""
# utils.py
def backward(loss, optimizer, args, scaler):
    scaler.scale(loss).backward()
# train.py
with torch.autocast("cuda", dtype=torch.float16, enabled=cfg.fp16):
    loss = criterion(model(x), y)
backward(loss, optimizer, cfg, scaler=scaler)
scaler.unscale_(optimizer)
clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
scaler.step(optimizer)
scaler.update()""")

INSTALL_CHECK_KEPT = rule(
    "A2A175", "apex-install-check-kept", "the \"please install apex\" check stays: another module of the run keeps apex code",
    fixes=False, severity=INFO,
    why="""
A check such as `if args.fp16 and not APEX_FOUND: raise ImportError("Please install apex")` goes with
the apex imports it guards once nothing needs apex. While another module of the same run keeps its
apex amp code (its own findings say why), removing the check would turn the clear ImportError into a
NameError deep in training on a machine without apex, so the check and its imports stay. Migrate that
module, then rerun: the check goes then.""",
    before="""
try:
    import apex
    APEX_FOUND = True
except ImportError:
    APEX_FOUND = False
if args.fp16 and not APEX_FOUND:
    raise ImportError("Please install apex")""",
    after="""
# unchanged while training.py keeps `from apex import amp`""")

APEX_EXTENSION_KEPT = rule(
    "A2A172", "apex-extension-import-kept", "apex's compiled extension (`amp_C`, `apex_C`, ...) is still imported: it needs apex",
    fixes=False, severity=WARNING,
    why="""
`amp_C`, `apex_C`, `fused_layer_norm_cuda`, `syncbn` and the other `*_cuda` modules are apex's compiled
extensions, installed only with apex. They have no drop-in torch equivalent, so the import stays and the
code still needs apex. A torch import written into the same `try` would never be bound when that import
fails, so the migration puts its torch imports before the `try`. Replace the code that uses the
extension (e.g. `amp_C.multi_tensor_l2norm` -> `torch.linalg.vector_norm` over the gradients), then
remove the import.""",
    before="""
try:
    import amp_C
    from apex.parallel import DistributedDataParallel as DDP
except ImportError:
    pass


def wrap(model):
    return DDP(model)""",
    after="""
from torch.nn.parallel import DistributedDataParallel as DDP
try:
    import amp_C
except ImportError:
    pass


def wrap(model):
    return DDP(model, broadcast_buffers=False)""")

SCALER_STATE_UNDER_APEX_FLAG = rule(
    "A2A173", "scaler-state-under-apex-flag", "the scaler's state is saved or restored only when apex is installed",
    fixes=False, severity=WARNING,
    why="""
`if APEX_FOUND: state["amp"] = amp.state_dict()` becomes `scaler.state_dict()` under the same flag, and the
flag still means "apex is installed" (its `try` imports something else from apex, so it stays). On a
machine without apex the scaler's state is then never saved (or never restored), and a resumed fp16 run
fails on the missing key or restarts its loss scale. Guard the line with the scaler's switch instead
(`if scaler.is_enabled():`), or save and restore it always.""",
    before="""
if APEX_FOUND:
    state["amp"] = amp.state_dict()""",
    after="""
if self.scaler.is_enabled():  # by hand
    state["amp"] = self.scaler.state_dict()""")

BF16_SWITCH_NOT_REACHED = rule(
    "A2A174", "bf16-switch-not-reached", "with `--dtype bfloat16` the amp on/off switch of another module's `amp.initialize` cannot reach this region",
    fixes=False, severity=WARNING,
    why="""
With float16 the switch of a conditional `amp.initialize` (`opt_level = "O1" if fp16 else "O0"`) reaches
the autocast region in another module through the scaler (`enabled=scaler.is_enabled()`). With
bfloat16 there is no scaler, and this module holds no `amp.initialize` of its own: an autocast written
here without `enabled=` would train the fp32 mode in bf16. The module's amp code (and the
`amp.initialize` of the modules that call it) is left as it is: pass the switch by hand
(`do_train(..., amp_enabled=...)` and `torch.autocast(..., enabled=amp_enabled)`), or rerun with float16.""",
    before="""
# trainer.py (train_net.py: amp.initialize(..., opt_level=opt_level))
with amp.scale_loss(loss, optimizer) as scaled_loss:
    scaled_loss.backward()""",
    after="""
# unchanged under --dtype bfloat16""")
