"""Rule codes of apex itself in the migrated module (A2A1xx): its imports, branches, uses left behind,
a local `apex` shadowing it, install checks, backends nothing selects any more, with the text
`apex2amp explain` prints."""
from __future__ import annotations

from .base import FIX, INFO, WARNING, rule

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
import torch

try:
    from apex import amp
    has_apex = True
except ImportError:
    has_apex = False


def train(model, optimizer, loader):
    if has_apex:
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
        scaler = None
    else:
        scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        with torch.autocast("cuda"):
            loss = model(x).sum()
        if has_apex:
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()""",
    after="""
import torch


def train(model, optimizer, loader):
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        with torch.autocast("cuda"):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()""")


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


STAR_IMPORT = rule(
    "A2A123", "apex-star-import-used", "`from apex.fp16_utils import *` provides names still used here",
    fixes=False, severity=WARNING,
    why="""
The star import silently provides `to_python_float`, `network_to_half`, `FP16_Optimizer`...; removing it
would break those names. Replace each with its torch equivalent (`x.item()`, fp32 model + autocast +
GradScaler), then remove the import.""",
    before="""
import torch
from apex.fp16_utils import *


def train(model, optimizer, loader, log):
    model = network_to_half(model)
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        log(to_python_float(loss))""",
    after="""
import torch
from apex.fp16_utils import *


def train(model, optimizer, loader, log):
    model = network_to_half(model)
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        log(loss.item())""")


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
# file: apex.py
class amp:
    @staticmethod
    def initialize(model, optimizer, **kwargs):
        return model, optimizer

# file: train.py
from apex import amp


def setup(model, optimizer):
    return amp.initialize(model, optimizer, opt_level="O1")""",
    after="""
""")


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
# file: pkg/__init__.py

# file: pkg/apex.py
class amp:
    @staticmethod
    def initialize(model, optimizer, **kwargs):
        return model, optimizer

# file: pkg/tool.py
from apex import amp


def setup(model, optimizer):
    return amp.initialize(model, optimizer, opt_level="O1")


if __name__ == "__main__":
    setup(None, None)""",
    after="""
""")


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
import torch
import torch.nn as nn
from packaging import version

try:
    from apex import amp
    has_apex = True
except ImportError:
    has_apex = False


class Trainer:
    def __init__(self, model, optimizer, fp16):
        self.model, self.optimizer = model, optimizer
        self.criterion = nn.MSELoss()
        self.backend = "fp32"
        if fp16 and version.parse(torch.__version__) >= version.parse("1.6"):
            self.scaler = torch.cuda.amp.GradScaler()
            self.backend = "native"
        elif fp16 and has_apex:
            self.model, self.optimizer = amp.initialize(self.model, self.optimizer, opt_level="O1")
            self.backend = "apex"

    def train_step(self, x, y):
        self.optimizer.zero_grad()
        if self.backend == "native":
            with torch.cuda.amp.autocast():
                loss = self.criterion(self.model(x), y)
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss = self.criterion(self.model(x), y)
            if self.backend == "apex":
                with amp.scale_loss(loss, self.optimizer) as scaled_loss:
                    scaled_loss.backward()
            else:
                loss.backward()
            self.optimizer.step()
        return loss.item()""",
    after="""
import torch
import torch.nn as nn
from packaging import version


class Trainer:
    def __init__(self, model, optimizer, fp16):
        self.model, self.optimizer = model, optimizer
        self.criterion = nn.MSELoss()
        self.backend = "fp32"
        if fp16 and version.parse(torch.__version__) >= version.parse("1.6"):
            self.scaler = torch.amp.GradScaler("cuda")
            self.backend = "native"

    def train_step(self, x, y):
        self.optimizer.zero_grad()
        if self.backend == "native":
            with torch.autocast("cuda"):
                loss = self.criterion(self.model(x), y)
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss = self.criterion(self.model(x), y)
            loss.backward()
            self.optimizer.step()
        return loss.item()""")


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
# file: main.py
try:
    import apex  # noqa: F401
    APEX_FOUND = True
except ImportError:
    APEX_FOUND = False

from training import Trainer


def main(args):
    if args.fp16 and not APEX_FOUND:
        raise ImportError("Please install apex to use fp16 training.")
    return Trainer(None, None, args.fp16)

# file: training.py
import torch
from apex import amp
from apex.amp import _amp_state


class Trainer:
    def __init__(self, model, optimizer, fp16):
        self.model, self.optimizer, self.fp16 = model, optimizer, fp16

    def setup(self):
        if self.fp16:
            self.model, self.optimizer = amp.initialize(self.model, self.optimizer, opt_level="O2")
            _amp_state.loss_scalers[0]._loss_scale = 2 ** 16

    def step(self, x, y):
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        with amp.scale_loss(loss, self.optimizer) as scaled_loss:
            scaled_loss.backward()
        self.optimizer.step()""",
    after="""
""")


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
