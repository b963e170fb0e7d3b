"""Rule codes of the scaler reaching code beyond the training loop (A2A1xx): threaded through calls,
closures, objects, subclasses and other modules, with the text `apex2amp explain` prints."""
from __future__ import annotations

from .base import FIX, WARNING, rule

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
from apex import amp


class BackwardMixin:
    def backward(self, loss):
        with amp.scale_loss(loss, self.optimizer) as scaled_loss:
            scaled_loss.backward()

    def optimizer_step(self):
        self.optimizer.step()
        self.optimizer.zero_grad()""",
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
# file: step_mixin.py
import torch
from apex import amp


class AmpStepMixin:
    def training_step(self, x, y):
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        self.optimizer.zero_grad()
        with amp.scale_loss(loss, self.optimizer) as scaled_loss:
            scaled_loss.backward()
        self.optimizer.step()
        return loss.item()

# file: train.py
import torch
from apex import amp

from step_mixin import AmpStepMixin


class Trainer(AmpStepMixin):
    def __init__(self, model, optimizer, fp16):
        self.model, self.optimizer = model, optimizer
        if fp16:
            self.model, self.optimizer = amp.initialize(self.model, self.optimizer, opt_level="O1")

    def fit(self, batches):
        return [self.training_step(x.to(torch.float32), y) for x, y in batches]""",
    after="""
# file: step_mixin.py
import torch


class AmpStepMixin:
    def training_step(self, x, y):
        with torch.autocast("cuda", dtype=torch.float16, enabled=self.scaler.is_enabled()):
            loss = torch.nn.functional.mse_loss(self.model(x), y)
        self.optimizer.zero_grad()
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss.item()

# file: train.py
import torch

from step_mixin import AmpStepMixin


class Trainer(AmpStepMixin):
    def __init__(self, model, optimizer, fp16):
        self.model, self.optimizer = model, optimizer
        self.scaler = torch.amp.GradScaler("cuda", enabled=bool(fp16))

    def fit(self, batches):
        return [self.training_step(x.to(torch.float32), y) for x, y in batches]""")


SCALER_VIA_CONSTRUCTOR = rule(
    "A2A185", "scaler-through-the-constructor",
    "a class holding the amp code, its `amp.initialize` in the scripts that build it: `__init__` takes the scaler",
    fixes=True, severity=FIX,
    why="""
A trainer class whose methods scale the loss and step `self.optimizer`, built by scripts that call
`amp.initialize` first and hand it the model and optimizer, has no apex state of its own to migrate
into: the GradScaler is made where `amp.initialize` ran (with its enabled switch) and handed in. Its
`__init__` takes a `scaler` parameter and keeps it on `self.scaler`; its methods read `self.scaler`, so
their signatures and callers stay as they are; every `Trainer(...)` of the run passes `scaler=scaler`.
Not done when a call cannot pass it (a script that keeps apex or has no `amp.initialize`), the class is
used as a value or subclassed in another file, has a subclass or another use in its own module, or
has no `__init__` of its own: the module is then left as it is (A2A126).""",
    before="""
# file: trainer.py
import torch
from apex import amp


class Trainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer

    def train_epoch(self, loader):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(self.model(x), y)
            with amp.scale_loss(loss, self.optimizer) as scaled_loss:
                scaled_loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad()

# file: run.py
import torch
from apex import amp

from trainer import Trainer


def main(model, loader, fp16):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    if fp16:
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    Trainer(model, optimizer).train_epoch(loader)""",
    after="""
# file: trainer.py
import torch


class Trainer:
    def __init__(self, model, optimizer, scaler):
        self.scaler = scaler
        self.model = model
        self.optimizer = optimizer

    def train_epoch(self, loader):
        for x, y in loader:
            with torch.autocast("cuda", dtype=torch.float16, enabled=self.scaler.is_enabled()):
                loss = torch.nn.functional.mse_loss(self.model(x), y)
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.optimizer.zero_grad()

# file: run.py
import torch

from trainer import Trainer


def main(model, loader, fp16):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda", enabled=bool(fp16))
    Trainer(model, optimizer, scaler=scaler).train_epoch(loader)""")


ENGINE_OVERRIDE = rule(
    "A2A418", "engine-step-override", "a base-class method that steps the amp optimizer -> an override on the apex engine",
    fixes=True, severity=FIX,
    why="""
Engine classes often come one per precision backend on a shared base (`Engine`, `ApexEngine(Engine)`,
`NativeEngine(Engine)`), and the base's `optimizer_step` calls `self.optimizer.step()` for all of them.
Only the apex engine has the GradScaler (kept on `self`), so the base method cannot use it. The apex
engine gets its own copy of that method with `scaler.step(optimizer)` and `scaler.update()`; the base
and the other backends keep theirs unchanged. This holds with no other backend too: the base alone
is the fp32 engine, whose objects have no scaler. Not done when the class already defines the method,
the method is decorated, calls `super()` or reads private `__names`, or another class comes first in
the apex engine's MRO; the module is then left as it is (A2A126), unless the base is abstract (`ABC`
with an `@abstractmethod`: no object of its own) and may read the scaler.""",
    before="""
import torch
from apex import amp


class Engine:
    def __init__(self, model, optimizer, criterion):
        self.model, self.optimizer, self.criterion = model, optimizer, criterion

    def forward_backward(self, x, y):
        loss = self.criterion(self.model(x), y)
        loss.backward()
        return loss

    def optimizer_step(self):
        self.optimizer.step()
        self.optimizer.zero_grad()


class ApexEngine(Engine):
    def __init__(self, model, optimizer, criterion, opt_level="O1"):
        super().__init__(model, optimizer, criterion)
        self.model, self.optimizer = amp.initialize(self.model, self.optimizer, opt_level=opt_level)

    def forward_backward(self, x, y):
        loss = self.criterion(self.model(x), y)
        with amp.scale_loss(loss, self.optimizer) as scaled_loss:
            scaled_loss.backward()
        return loss


class NativeEngine(Engine):
    def __init__(self, model, optimizer, criterion):
        super().__init__(model, optimizer, criterion)
        self.scaler = torch.cuda.amp.GradScaler()

    def forward_backward(self, x, y):
        with torch.cuda.amp.autocast():
            loss = self.criterion(self.model(x), y)
        self.scaler.scale(loss).backward()
        return loss

    def optimizer_step(self):
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad()


ENGINES = {"fp32": Engine, "apex": ApexEngine, "native": NativeEngine}""",
    after="""
import torch


class Engine:
    def __init__(self, model, optimizer, criterion):
        self.model, self.optimizer, self.criterion = model, optimizer, criterion

    def forward_backward(self, x, y):
        loss = self.criterion(self.model(x), y)
        loss.backward()
        return loss

    def optimizer_step(self):
        self.optimizer.step()
        self.optimizer.zero_grad()


class ApexEngine(Engine):
    def __init__(self, model, optimizer, criterion, opt_level="O1"):
        super().__init__(model, optimizer, criterion)
        self.grad_scaler = torch.amp.GradScaler("cuda", enabled=opt_level != "O0")

    def forward_backward(self, x, y):
        with torch.autocast("cuda", dtype=torch.float16, enabled=self.grad_scaler.is_enabled()):
            loss = self.criterion(self.model(x), y)
        self.grad_scaler.scale(loss).backward()
        return loss

    def optimizer_step(self):
        self.grad_scaler.step(self.optimizer)
        self.grad_scaler.update()
        self.optimizer.zero_grad()


class NativeEngine(Engine):
    def __init__(self, model, optimizer, criterion):
        super().__init__(model, optimizer, criterion)
        self.scaler = torch.amp.GradScaler("cuda")

    def forward_backward(self, x, y):
        with torch.autocast("cuda"):
            loss = self.criterion(self.model(x), y)
        self.scaler.scale(loss).backward()
        return loss

    def optimizer_step(self):
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad()


ENGINES = {"fp32": Engine, "apex": ApexEngine, "native": NativeEngine}""")


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
# file: utils.py
from apex import amp


def backward(loss, optimizer, args):
    if args.fp16:
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
    else:
        loss.backward()

# file: train.py
import torch
from apex import amp

from utils import backward


def train(cfg, model, optimizer, loader, criterion):
    if cfg.fp16:
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    for x, y in loader:
        loss = criterion(model(x), y)
        backward(loss, optimizer, cfg)
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        optimizer.step()""",
    after="""
# file: utils.py
def backward(loss, optimizer, args, scaler):
    scaler.scale(loss).backward()

# file: train.py
import torch

from utils import backward


def train(cfg, model, optimizer, loader, criterion):
    scaler = torch.amp.GradScaler("cuda", enabled=bool(cfg.fp16))
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16, enabled=bool(cfg.fp16)):
            loss = criterion(model(x), y)
        backward(loss, optimizer, cfg, scaler=scaler)
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        scaler.step(optimizer)
        scaler.update()""")


INIT_HELPER = rule(
    "A2A186", "setup-helper-across-modules",
    "a setup helper amp-initializing for other modules (`net, opt = prepare(net, opt, ..., fp16, opt_level)`): "
    "`amp.initialize` dropped there; each caller makes the GradScaler after the call",
    fixes=True, severity=FIX,
    why="""
A module-level helper such as `prepare(net, opt, device, n_gpu, fp16, opt_level)` amp-initializes its model
and optimizer parameters under `if fp16:` and returns them; the trainers of other modules call it and
scale, clip and step. The helper's `amp.initialize` (and the registrations CUDA autocast already makes,
A2A183) is dropped, the model and optimizer pass through; each caller keeps the call and makes
`torch.amp.GradScaler("cuda", enabled=<fp16 argument> and <opt_level argument> != "O0")` right after it
(the call's arguments at the helper's fp16 and opt_level parameters, or the helper's defaults), then
migrates its amp code on that scaler (`self.scaler` when the results are kept on `self`). The files
migrate together or not at all: when a caller of the run keeps its apex code, or no file of the run
calls the helper, the helper keeps its `amp.initialize` (A2A124). A caller passing no optimizer
(`prepare(model, None, ...)`) is reported (under apex its fp16 mode failed; it now runs fp32) and left
as it is.""",
    before="""
# file: setup_utils.py
from apex import amp


def prepare(net, opt, fp16=False, opt_level="O1"):
    if fp16:
        net, opt = amp.initialize(net, opt, opt_level=opt_level)
    return net, opt

# file: train.py
import torch
from apex import amp

from setup_utils import prepare


class Trainer:
    def __init__(self, model, optimizer, cfg):
        self.model, self.optimizer = prepare(model, optimizer, cfg.fp16, cfg.opt_level)

    def train_step(self, x, y):
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        with amp.scale_loss(loss, self.optimizer) as scaled_loss:
            scaled_loss.backward()
        self.optimizer.step()""",
    after="""
# file: setup_utils.py
def prepare(net, opt, fp16=False, opt_level="O1"):
    return net, opt

# file: train.py
import torch

from setup_utils import prepare


class Trainer:
    def __init__(self, model, optimizer, cfg):
        self.model, self.optimizer = prepare(model, optimizer, cfg.fp16, cfg.opt_level)
        self.scaler = torch.amp.GradScaler("cuda", enabled=bool(cfg.fp16 and cfg.opt_level != "O0"))

    def train_step(self, x, y):
        with torch.autocast("cuda", dtype=torch.float16, enabled=self.scaler.is_enabled()):
            loss = torch.nn.functional.mse_loss(self.model(x), y)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()""")
