"""Rule codes of amp's state in checkpoints (A2A1xx, A2A416): state dicts, apex's checkpoint key,
restores, with the text `apex2amp explain` prints."""
from __future__ import annotations

from .base import FIX, WARNING, rule

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


REINITIALIZE = rule(
    "A2A416", "amp-reinitialize-on-restore", "a second `amp.initialize` before `amp.load_state_dict` (restore) removed",
    fixes=True, severity=FIX,
    why="""
apex's restore recipe calls `amp.initialize` again on the model and optimizer it already returned, then
`amp.load_state_dict(...)`: the second call makes fresh loss scalers that the load overwrites. Native AMP
has one GradScaler, made where the first `amp.initialize` was and kept on `self`; the load restores its
state (`self.scaler.load_state_dict(...)`), so the second call goes. This applies when both calls are in
methods of one class, the second assigns the same `self` attributes from the same objects with the same
options, and its block goes on to `amp.load_state_dict`. Several calls one after the other in one block,
one per model / optimizer pair with the same options (a GAN's generator and discriminators), share one
GradScaler as they shared apex's one loss scaler (A2A101); other modules with several `amp.initialize`
calls are reported (A2A117).""",
    before="""
import torch
from apex import amp


def build_model():
    return torch.nn.Linear(10, 4).cuda()


def build_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.1)


class Trainer:
    def __init__(self, model, optimizer, opt_level):
        self.opt_level = opt_level
        self.model, self.optimizer = amp.initialize(model, optimizer, opt_level=opt_level)

    def train_step(self, x, y):
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        self.optimizer.zero_grad()
        with amp.scale_loss(loss, self.optimizer) as scaled_loss:
            scaled_loss.backward()
        self.optimizer.step()

    def save(self, path):
        torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                    "amp": amp.state_dict()}, path)

    def restore(self, path):
        ckpt = torch.load(path)
        self.model = build_model()
        self.model.load_state_dict(ckpt["model"])
        self.optimizer = build_optimizer(self.model)
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.model, self.optimizer = amp.initialize(self.model, self.optimizer, opt_level=self.opt_level)
        amp.load_state_dict(ckpt["amp"])""",
    after="""
import torch


def build_model():
    return torch.nn.Linear(10, 4).cuda()


def build_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=0.1)


class Trainer:
    def __init__(self, model, optimizer, opt_level):
        self.opt_level = opt_level
        self.model, self.optimizer = model, optimizer
        self.scaler = torch.amp.GradScaler("cuda", enabled=opt_level != "O0")

    def train_step(self, x, y):
        with torch.autocast("cuda", dtype=torch.float16, enabled=self.scaler.is_enabled()):
            loss = torch.nn.functional.mse_loss(self.model(x), y)
        self.optimizer.zero_grad()
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()

    def save(self, path):
        torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                    "amp": self.scaler.state_dict()}, path)

    def restore(self, path):
        ckpt = torch.load(path)
        self.model = build_model()
        self.model.load_state_dict(ckpt["model"])
        self.optimizer = build_optimizer(self.model)
        self.optimizer.load_state_dict(ckpt["optimizer"])
        self.scaler.load_state_dict(ckpt["amp"])""")


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
import torch

try:
    from apex import amp
    import apex_C  # flatten/unflatten kernels used by the bucketing code
    APEX_FOUND = True
except ImportError:
    APEX_FOUND = False


class Trainer:
    def __init__(self, model, optimizer, fp16):
        self.model = model
        self.optimizer = optimizer
        self.fp16 = fp16
        if fp16:
            self.model, self.optimizer = amp.initialize(model, optimizer, opt_level="O1")

    def state(self):
        out = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}
        if APEX_FOUND:
            out["amp"] = amp.state_dict()
        return out

    def load(self, ckpt):
        self.model.load_state_dict(ckpt["model"])
        self.optimizer.load_state_dict(ckpt["optimizer"])
        if self.fp16:
            amp.load_state_dict(ckpt["amp"])

    def step(self, x, y):
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        with amp.scale_loss(loss, self.optimizer) as scaled_loss:
            scaled_loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        return loss.item()""",
    after="""
import torch

try:
    import apex_C  # flatten/unflatten kernels used by the bucketing code
    APEX_FOUND = True
except ImportError:
    APEX_FOUND = False


class Trainer:
    def __init__(self, model, optimizer, fp16):
        self.model = model
        self.optimizer = optimizer
        self.fp16 = fp16
        self.scaler = torch.amp.GradScaler("cuda", enabled=bool(fp16))
        if fp16:
            self.model, self.optimizer = model, optimizer

    def state(self):
        out = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}
        if APEX_FOUND:
            out["amp"] = self.scaler.state_dict()
        return out

    def load(self, ckpt):
        self.model.load_state_dict(ckpt["model"])
        self.optimizer.load_state_dict(ckpt["optimizer"])
        if self.fp16:
            self.scaler.load_state_dict(ckpt["amp"])

    def step(self, x, y):
        with torch.autocast("cuda", dtype=torch.float16, enabled=self.scaler.is_enabled()):
            loss = torch.nn.functional.mse_loss(self.model(x), y)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad()
        return loss.item()""")
