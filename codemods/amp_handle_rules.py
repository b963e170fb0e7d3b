"""Rule codes of the amp shapes that reach apex amp through a handle: apex's old `amp.init()` API and the
amp module stored on an object (codemods/amp_old_init.py, codemods/amp_object_attr.py)."""
from __future__ import annotations

from .base import FIX, rule

OLD_INIT = rule(
    "A2A180", "apex-old-init-to-autocast", "apex's old `amp.init()` -> an autocast region over the rest of the function",
    fixes=True, severity=FIX,
    why="""
`amp.init()` is apex's first amp API: from the call on it patched torch's functions for the whole
process, so everything after it ran with O1's fp16 casts. Evaluation scripts call it once in `main()`
and never use the handle it returns. Natively that is `torch.autocast("cuda", dtype=torch.float16,
enabled=...)` from the call to the end of the function: the statements after the call move into one
`with` block (the model stays fp32; the verbose log is dropped). apex2amp does this only when nothing
of the program runs after the function returns (it is called only at the end of the
`if __name__ == "__main__":` block), the call sits in the function's own body, the handle is unused
and the module has no other apex amp call; otherwise the call keeps an A2A115 finding with the reason.""",
    before="""
import torch
from apex import amp


def main():
    model = torch.nn.Linear(4, 2).cuda()
    handle = amp.init(enabled=True, verbose=False)
    for x in torch.randn(3, 5, 4):
        print(model(x.cuda()).sum().item())


if __name__ == "__main__":
    main()""",
    after="""
import torch


def main():
    model = torch.nn.Linear(4, 2).cuda()
    with torch.autocast("cuda", dtype=torch.float16, enabled=True):
        for x in torch.randn(3, 5, 4):
            print(model(x.cuda()).sum().item())


if __name__ == "__main__":
    main()""")

HANDLE_ON_OBJECT = rule(
    "A2A181", "apex-amp-stored-on-object", "apex amp stored on an object (`model.amp = amp`) -> a GradScaler attribute",
    fixes=True, severity=FIX,
    why="""
Some trainers (argus models) keep apex amp itself on the model object: a helper module runs
`amp.initialize` on the object's members and stores `model.amp = amp`; the model class starts with
`self.amp = None` and calls `self.amp.scale_loss(loss, self.optimizer)` when it is set. The migration
spans both modules: the helper stores `model.scaler = torch.amp.GradScaler("cuda")` instead (the
initialize goes; the model stays fp32), the class starts with a disabled GradScaler, tests
`self.scaler.is_enabled()`, calls `self.scaler.scale(loss).backward()`, steps through
`self.scaler.step(self.optimizer)` + `self.scaler.update()`, and runs the forward and loss under
`torch.autocast(..., enabled=self.scaler.is_enabled())`. apex2amp does this only when the whole run
has one such helper and one such class, they agree on the optimizer attribute, and no other code of
the run reads or stores the handle attribute or a `.scaler` attribute; otherwise it reports A2A124
and A2A125 and changes nothing.""",
    before="""
# utils.py
def initialize_amp(model, opt_level="O1"):
    from apex import amp
    model.net, model.optimizer = amp.initialize(model.net, model.optimizer, opt_level=opt_level)
    model.amp = amp""",
    after="""
# utils.py
def initialize_amp(model, opt_level="O1"):
    model.scaler = torch.amp.GradScaler("cuda")""")

FLOAT_FUNCTION = rule(
    "A2A182", "apex-float-function-to-helper", "`amp.float_function` -> a helper that runs the function in fp32 under autocast",
    fixes=True, severity=FIX,
    why="""
apex's `amp.float_function(fn)` (also as a decorator) ran `fn`, while amp was active, with its
floating-point tensor arguments cast to fp32: custom CUDA kernels that take fp32 only (maskrcnn's
nms, ROIAlign, ROIPool) are marked so. torch.autocast has no function registry; the native
equivalent is the same cast while autocast is on, with autocast off inside the function (what
`torch.amp.custom_fwd(cast_inputs=torch.float32)` does for an autograd.Function). apex2amp adds
`autocast_float_function` to the file and uses it where `amp.float_function` was.""",
    before="""
import torch
from apex import amp


class Pool(torch.nn.Module):
    @amp.float_function
    def forward(self, x):
        return x.sum(-1)""",
    after='''
import torch


def autocast_float_function(fn):
    """`fn` run in fp32 while autocast is on: its floating-point tensor arguments cast to fp32, autocast off
    inside (added by apex2amp for apex's `amp.float_function`)."""

    def to_fp32(x):
        if isinstance(x, torch.Tensor):
            return x.float() if x.is_floating_point() else x
        if isinstance(x, (list, tuple)):
            return type(x)(to_fp32(v) for v in x)
        if isinstance(x, dict):
            return {k: to_fp32(v) for k, v in x.items()}
        return x

    def run(*args, **kwargs):
        if not torch.is_autocast_enabled("cuda"):
            return fn(*args, **kwargs)
        with torch.autocast("cuda", enabled=False):
            return fn(*to_fp32(args), **to_fp32(kwargs))

    return run


class Pool(torch.nn.Module):
    @autocast_float_function
    def forward(self, x):
        return x.sum(-1)''')


REGISTRATION_COVERED = rule(
    "A2A183", "amp-registration-already-in-autocast", "`amp.register_half_function(torch, \"einsum\")` etc. "
    "removed where autocast already casts the function so",
    fixes=True, severity=FIX,
    why="""
apex's `amp.register_half_function(module, name)` (and `register_float_function`,
`register_promote_function`) put a function on O1's fp16 / fp32 / promote cast lists; BERT-era scripts
register `torch.einsum` so. CUDA autocast has its own lists and no registry: where its list already holds
the function with the same cast (`torch.einsum`, `torch.bmm`, `F.linear` run in fp16; `torch.exp`,
`F.softmax`, the losses in fp32; `torch.addcmul` at the widest input type), the registration has nothing
left to do and is removed. Any other registration stays reported (A2A114). As everywhere in the
migration, the cast applies inside the autocast region only, not process-wide as apex's patching did.""",
    before="""
import torch
from apex import amp

amp.register_half_function(torch, "einsum")


def score(q, k):
    return torch.einsum("bd,cd->bc", q, k)""",
    after="""
import torch


def score(q, k):
    return torch.einsum("bd,cd->bc", q, k)""")
