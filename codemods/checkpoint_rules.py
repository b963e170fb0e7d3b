"""Rule codes of the checkpoint save/restore pairing (A2A135-A2A137) and of the native-AMP
checkpoint lint (A2A704), with the text `apex2amp explain` prints."""
from __future__ import annotations

from .base import FIX, WARNING, rule

AMP_TO_RESTORE_HELPER = rule(
    "A2A135", "amp-passed-to-checkpoint-helper", "`amp=amp` passed to a checkpoint helper -> `amp=scaler`",
    fixes=True, severity=FIX,
    why="""
A checkpoint helper that receives the apex amp module as a value and only calls `.state_dict()` or
`.load_state_dict(...)` on it (a dedicated parameter, or a generic `**kwargs` loader that restores each
value) works unchanged with a GradScaler, which has both methods. The call passes the scaler instead,
under the same keyword, so the checkpoint key still matches the one the save writes. The helper may
live in another module of the run; without proof of what it does with the value, nothing changes
(A2A136).""",
    before="""
# file: utils.py
import torch


def restart_from_checkpoint(path, **kwargs):
    checkpoint = torch.load(path, map_location="cpu")
    for key, value in kwargs.items():
        if key in checkpoint and value is not None:
            value.load_state_dict(checkpoint[key])

# file: train.py
import torch
from apex import amp

from utils import restart_from_checkpoint


def main(args, model, optimizer, loader):
    if args.use_fp16:
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    restart_from_checkpoint(args.checkpoint, state_dict=model, optimizer=optimizer, amp=amp)
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        if args.use_fp16:
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
        else:
            loss.backward()
        optimizer.step()
    save_dict = {"state_dict": model.state_dict(), "optimizer": optimizer.state_dict()}
    if args.use_fp16:
        save_dict["amp"] = amp.state_dict()
    torch.save(save_dict, args.checkpoint)""",
    after="""
# file: train.py
import torch

from utils import restart_from_checkpoint


def main(args, model, optimizer, loader):
    scaler = torch.amp.GradScaler("cuda", enabled=bool(args.use_fp16))
    restart_from_checkpoint(args.checkpoint, state_dict=model, optimizer=optimizer, amp=scaler)
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16, enabled=bool(args.use_fp16)):
            loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    save_dict = {"state_dict": model.state_dict(), "optimizer": optimizer.state_dict()}
    if args.use_fp16:
        save_dict["amp"] = scaler.state_dict()
    torch.save(save_dict, args.checkpoint)""")

PAIR_KEPT = rule(
    "A2A136", "checkpoint-save-restore-kept-together", "amp state save and restore left unmigrated together",
    fixes=False, severity=WARNING,
    why="""
The amp state a checkpoint saves must be restored by the same kind of object: a save migrated to
`scaler.state_dict()` beside a restore that still hands the state to apex (`amp=amp` to a helper, or a
suppressed `amp.load_state_dict`) crashes or silently drops the loss scale on resume. When a restore of
the saved amp state cannot be migrated (the helper is not in this run, or it uses the value for more
than `state_dict`/`load_state_dict`), the save and every restore of the module are left as they are, and
each site is reported. Migrate the helper (or pass it the GradScaler) by hand, or run the tool on the
helper's module too, then rerun.""",
    before="""
import torch
from apex import amp

from utils import restart_from_checkpoint  # utils.py is not in this run


def main(args, model, optimizer, loader):
    if args.use_fp16:
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    restart_from_checkpoint(args.checkpoint, state_dict=model, optimizer=optimizer, amp=amp)
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        if args.use_fp16:
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
        else:
            loss.backward()
        optimizer.step()
    save_dict = {"state_dict": model.state_dict(), "optimizer": optimizer.state_dict()}
    if args.use_fp16:
        save_dict["amp"] = amp.state_dict()
    torch.save(save_dict, args.checkpoint)""",
    after="""
# (unchanged: both sites reported)""")

AMP_VALUE_KEPT = rule(
    "A2A137", "amp-module-passed-as-value", "the apex amp module is passed as a value to code that is not a checkpoint helper",
    fixes=False, severity=WARNING,
    why="""
`amp_module=apex.amp`, `Trainer(amp=amp)`: the receiver may call `initialize`, `scale_loss` or other
apex functions on it, which a GradScaler does not have, and once `import apex` is gone the name
dangles. The module's amp code is left as it is; migrate the receiver to take a GradScaler, then rerun.""",
    before="""
import torch
from apex import amp


def backward_and_save(loss, optimizer, path, amp_module):
    with amp_module.scale_loss(loss, optimizer) as scaled_loss:
        scaled_loss.backward()
    optimizer.step()
    torch.save({"amp": amp_module.state_dict()}, path)


def train(model, optimizer, loader, path):
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()
    torch.save({"model": model.state_dict(), "amp": amp.state_dict()}, path)
    backward_and_save(loss, optimizer, path, amp_module=amp)""",
    after="""
# (unchanged: reported)""")

SAVED_NOT_RESTORED = rule(
    "A2A704", "scaler-state-saved-not-restored", "saved GradScaler state is never restored (or an `amp` name dangles at a restore)",
    fixes=False, severity=WARNING,
    why="""
A checkpoint that stores `scaler.state_dict()` under a key is only half of a resume: unless some
`scaler.load_state_dict(ckpt[KEY])` (or a checkpoint helper given the scaler, `amp=scaler`) restores it,
a resumed run starts again at the initial loss scale and skips steps the uninterrupted run did not.
Restoring under another key than the save wrote drops it the same way. The lint also reports an `amp`
name passed to a call where nothing binds it (apex is not imported): the resume fails with NameError.
It reads migrated code, whoever migrated it.""",
    before="""
torch.save({"model": model.state_dict(), "amp": scaler.state_dict()}, path)
...
model.load_state_dict(ckpt["model"])          # the scaler is never restored""",
    after="""
torch.save({"model": model.state_dict(), "amp": scaler.state_dict()}, path)
...
model.load_state_dict(ckpt["model"])
scaler.load_state_dict(ckpt["amp"])""")
