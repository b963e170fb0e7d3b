"""Rules of the FP16_Optimizer and hand-written loss-scaling migration (A2A501-A2A505, A2A510-A2A512).

The codemod is codemods/manual_scaling.py; the FP16_Optimizer pass is codemods/fp16_optimizer.py and the
static `(loss * S).backward()` pass codemods/static_scaling.py.
"""
from __future__ import annotations

from .base import FIX, INFO, WARNING, rule

rule("A2A501", "fp16-optimizer", "apex FP16_Optimizer pattern -> fp32 model + autocast + GradScaler", fixes=True,
     severity=FIX,
     why="""
FP16_Optimizer kept fp32 master weights for an fp16 model and scaled the loss itself. Native AMP keeps
the model fp32, runs forward + loss under torch.autocast, and scales with GradScaler:
optimizer.backward(loss) -> scaler.scale(loss).backward(); clip_master_grads(n) -> scaler.unscale_ +
clip_grad_norm_; optimizer.step() -> scaler.step(optimizer); scaler.update(). The dynamic scaler is
matched (init_scale=2**32, growth_interval=1000); a static scale is approximated (see A2A503).""",
     before="""
import torch
from apex.fp16_utils import FP16_Optimizer, network_to_half


def train(model, optimizer, loader, criterion):
    model = network_to_half(model)
    optimizer = FP16_Optimizer(optimizer, dynamic_loss_scale=True)
    for x, y in loader:
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        optimizer.backward(loss)
        optimizer.step()""",
     after="""
import torch


def train(model, optimizer, loader, criterion):
    scaler = torch.amp.GradScaler("cuda", init_scale=2.0**32, growth_interval=1000)
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = criterion(model(x), y)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()""")
rule("A2A502", "fp16-optimizer-manual", "FP16_Optimizer / fp16_utils usage that is not rewritten automatically",
     fixes=False, severity=WARNING,
     why="""
The FP16_Optimizer pattern (or an fp16_utils helper such as network_to_half, prep_param_lists,
master_params_to_model_params) was found but not every piece is in one recognised shape (the optimizer
is passed to another function, .overflow is read, a closure is used, ...). Migrate by hand: keep the
model fp32, wrap forward + loss in torch.autocast, create one torch.amp.GradScaler, and use
scaler.scale(loss).backward(), scaler.unscale_(opt) before clipping, scaler.step(opt), scaler.update().""",
     before="optimizer = FP16_Optimizer(optimizer, dynamic_loss_scale=True)\ntrain(model, optimizer)",
     after="scaler = torch.amp.GradScaler(\"cuda\", init_scale=2.0**32, growth_interval=1000)\n"
           "train(model, optimizer, scaler)")
rule("A2A503", "static-loss-scale", "static loss scale approximated by GradScaler", fixes=False, severity=INFO,
     why="""
GradScaler has no static mode: it always skips a step whose gradients overflow and halves the scale,
whereas a static scale never skips. init_scale=S with growth_interval=2**30 keeps the scale at S
until an overflow happens.""",
     before="""
import torch
from apex.fp16_utils import FP16_Optimizer, network_to_half


def train(model, optimizer, loader, criterion):
    model = network_to_half(model)
    optimizer = FP16_Optimizer(optimizer, static_loss_scale=128.0)
    for x, y in loader:
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        optimizer.backward(loss)
        optimizer.step()""",
     after="""
import torch


def train(model, optimizer, loader, criterion):
    scaler = torch.amp.GradScaler("cuda", init_scale=128.0, growth_interval=2**30)
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = criterion(model(x), y)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()""")
rule("A2A504", "fp16-model-cast-removed", "fp16 model cast removed (the model stays fp32 under autocast)",
     fixes=True, severity=FIX,
     why="""
GradScaler refuses fp16 gradients, and autocast picks fp16 per op, so network_to_half(model),
FP16Model(model), model.half() and BN_convert_float(...) go. network_to_half wrapped the model in
nn.Sequential(tofp16(), model): state dict keys lose their "1." prefix.""",
     before="""
import torch
from apex.fp16_utils import FP16_Optimizer, network_to_half


def train(model, optimizer, loader, criterion):
    model = network_to_half(model)
    optimizer = FP16_Optimizer(optimizer, dynamic_loss_scale=True)
    for x, y in loader:
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        optimizer.backward(loss)
        optimizer.step()""",
     after="""
import torch


def train(model, optimizer, loader, criterion):
    scaler = torch.amp.GradScaler("cuda", init_scale=2.0**32, growth_interval=1000)
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = criterion(model(x), y)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()""")
rule("A2A505", "fp16-optimizer-state", "FP16_Optimizer state_dict / load_state_dict format changes", fixes=False,
     severity=WARNING,
     why="""
FP16_Optimizer.state_dict() held loss_scaler, dynamic_loss_scale, overflow, optimizer_state_dict and
fp32_from_fp16. After the migration the optimizer is the plain torch optimizer, so save
scaler.state_dict() beside it, and convert old checkpoints with `apex2amp convert-checkpoint`.""",
     before="torch.save({'optimizer': optimizer.state_dict()}, path)",
     after="torch.save({'optimizer': optimizer.state_dict(), 'scaler': scaler.state_dict()}, path)")
rule("A2A510", "manual-loss-scaling", "static manual loss scaling -> GradScaler", fixes=True, severity=FIX,
     why="""
`(loss * S).backward()` followed by dividing every gradient by S is what GradScaler does:
scaler.scale(loss).backward(), scaler.unscale_(optimizer) where the division was, scaler.step and
scaler.update(). init_scale=S with growth_interval=2**30 keeps the scale static until an overflow,
which GradScaler (unlike the hand-written code) skips.""",
     before="""
import torch


def train(model, optimizer, loader, criterion):
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        (loss * 128.0).backward()
        for p in model.parameters():
            p.grad.data.div_(128.0)
        optimizer.step()""",
     after="""
import torch


def train(model, optimizer, loader, criterion):
    scaler = torch.amp.GradScaler("cuda", init_scale=128.0, growth_interval=2**30)
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        scaler.step(optimizer)
        scaler.update()""")
rule("A2A511", "manual-loss-scaling-manual", "hand-written loss scaling not rewritten automatically", fixes=False,
     severity=WARNING,
     why="""
The loss is multiplied by a scale before backward, but the rest of the pattern (dynamic halving on
overflow, fp32 master copies of a .half() model, skipped steps) is not in a shape the tool proves
equivalent. Replace it with one torch.amp.GradScaler("cuda") (init_scale=S; growth_factor/backoff_factor/
growth_interval to match your scaler) and an fp32 model under torch.autocast.""",
     before="(loss * loss_scale).backward()\nif overflow: loss_scale /= 2; continue",
     after="scaler.scale(loss).backward()\nscaler.step(optimizer)\nscaler.update()")
rule("A2A512", "scaler-wrapper-class", "class that owns the scaled backward (scaler class / optimizer wrapper)",
     fixes=False, severity=WARNING,
     why="""
A class whose method scales the loss, calls backward and steps (a hand-written loss scaler or an
FP16_Optimizer-style wrapper) hides the pattern from the tool. Replace its body with a
torch.amp.GradScaler: scaler.scale(loss).backward(); scaler.unscale_(opt) (before clipping);
scaler.step(opt); scaler.update(); and keep the model fp32 under torch.autocast.""",
     before="class Scaler:\n    def __call__(self, loss, opt):\n        (loss * self.scale).backward()\n        ...",
     after="scaler = torch.amp.GradScaler(\"cuda\")")

CODES = ("A2A501", "A2A502", "A2A503", "A2A504", "A2A505", "A2A510", "A2A511", "A2A512")
