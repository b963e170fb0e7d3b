"""Rules for AMP mode switches and `enabled=` values: the migration side (A2A130-A2A132, codemods/amp_modes.py)
and the lints on native AMP code (A2A702, A2A703, codemods/lint_autocast_modes.py)."""
from __future__ import annotations

from .records import FIX, INFO, WARNING, rule

APEX_CHOICE_NATIVE = rule(
    "A2A130", "apex-choice-runs-native-amp", "a mode switch's apex choice now selects the native-AMP path",
    fixes=True, severity=INFO,
    why="""
A script that offers apex and native AMP side by side (`--apex-amp` / `--native-amp`, `use_amp = 'apex'`)
loses its apex branches in the migration. Left at that, choosing apex would fall through to the fp32
`else` ("AMP not enabled") and train in float32 without a word. So where the switch is set, the apex
value becomes the native one: every later test, call and argument then sees the native choice, and
`--apex-amp` trains with torch.autocast + GradScaler. Where the option no longer offers apex at all
(its `choices` and `default` do not name it), the apex branches are unreachable and simply go.""",
    before="""
import argparse
import logging
from contextlib import suppress

import torch
import torch.nn as nn

from scalers import ApexScaler, NativeScaler

try:
    from apex import amp
    has_apex = True
except ImportError:
    has_apex = False

has_native_amp = hasattr(torch.cuda.amp, "autocast")

_logger = logging.getLogger("train")


def parse():
    parser = argparse.ArgumentParser()
    parser.add_argument("--amp", action="store_true", default=False, help="mixed precision, whichever is available")
    parser.add_argument("--apex-amp", action="store_true", default=False)
    parser.add_argument("--native-amp", action="store_true", default=False)
    return parser.parse_args()


def main():
    args = parse()
    use_amp = None
    if args.amp:
        # prefer native, fall back to apex
        if has_native_amp:
            args.native_amp = True
        elif has_apex:
            args.apex_amp = True
    if args.apex_amp and has_apex:
        use_amp = "apex"
    elif args.native_amp and has_native_amp:
        use_amp = "native"
    elif args.apex_amp or args.native_amp:
        _logger.warning("Neither APEX nor native Torch AMP is available, using float32.")

    model = nn.Linear(8, 4).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    amp_autocast = suppress
    loss_scaler = None
    if use_amp == "apex":
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
        loss_scaler = ApexScaler()
        _logger.info("Using NVIDIA APEX AMP. Training in mixed precision.")
    elif use_amp == "native":
        amp_autocast = torch.cuda.amp.autocast
        loss_scaler = NativeScaler()
        _logger.info("Using native Torch AMP. Training in mixed precision.")
    else:
        _logger.info("AMP not enabled. Training in float32.")

    for step in range(5):
        x = torch.randn(16, 8).cuda()
        with amp_autocast():
            loss = model(x).float().pow(2).mean()
        optimizer.zero_grad()
        if loss_scaler is not None:
            loss_scaler(loss, optimizer)
        else:
            loss.backward()
            optimizer.step()""",
    after="""
import argparse
import logging
from contextlib import suppress

import torch
import torch.nn as nn

from scalers import ApexScaler, NativeScaler

has_native_amp = hasattr(torch.cuda.amp, "autocast")

_logger = logging.getLogger("train")


def parse():
    parser = argparse.ArgumentParser()
    parser.add_argument("--amp", action="store_true", default=False, help="mixed precision, whichever is available")
    parser.add_argument("--apex-amp", action="store_true", default=False)
    parser.add_argument("--native-amp", action="store_true", default=False)
    return parser.parse_args()


def main():
    args = parse()
    use_amp = None
    if args.amp:
        # prefer native, fall back to apex
        if has_native_amp:
            args.native_amp = True
        else:
            args.apex_amp = True
    if args.apex_amp:
        use_amp = "native"
    elif args.native_amp and has_native_amp:
        use_amp = "native"
    elif args.apex_amp or args.native_amp:
        _logger.warning("Neither APEX nor native Torch AMP is available, using float32.")

    model = nn.Linear(8, 4).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    amp_autocast = suppress
    loss_scaler = None
    if use_amp == "native":
        amp_autocast = torch.cuda.amp.autocast
        loss_scaler = NativeScaler()
        _logger.info("Using native Torch AMP. Training in mixed precision.")
    else:
        _logger.info("AMP not enabled. Training in float32.")

    for step in range(5):
        x = torch.randn(16, 8).cuda()
        with amp_autocast():
            loss = model(x).float().pow(2).mean()
        optimizer.zero_grad()
        if loss_scaler is not None:
            loss_scaler(loss, optimizer)
        else:
            loss.backward()
            optimizer.step()""")

APEX_CHOICE_FP32 = rule(
    "A2A131", "apex-choice-would-run-fp32", "a mode switch's apex branch kept: removing it would train the apex choice in fp32",
    fixes=False, severity=WARNING,
    why="""
The apex branch of a mode switch can go only where the apex choice is shown to reach a native-AMP path
instead. That is not shown when the selector arrives from elsewhere (a function parameter, another
module, a computed value) or when an option still accepts the apex value (`choices=["apex", "native"]`):
the choice would then fall through to an fp32 `else`, or to nothing. The module's amp code is left as it
is. Make the code that sets the selector choose the native value for apex (or drop the apex value from
the option's choices and default), then rerun.""",
    before="""
import torch
from apex import amp


def train_step(model, optimizer, scaler, x, amp_mode):
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp_mode == "native"):
        loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    if amp_mode == "apex":
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()
    elif amp_mode == "native":
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()
        optimizer.step()""",
    after="""
# unchanged; the caller should pass "native" where it passed "apex", then rerun""")

APEX_FLAG_LEFTOVER = rule(
    "A2A132", "apex-flag-beside-torch-import", "an apex flag set beside imports that no longer come from apex removed",
    fixes=True, severity=FIX,
    why="""
Once apex's imports in a `try: ... except ImportError:` are rewritten to torch (`from torch.nn.parallel
import DistributedDataParallel as ApexDDP`), the `has_apex = True` beside them no longer says whether apex
is installed: it is always true. With no apex import left in the `try`, the flag assignments go and its
tests fold (`has_apex and use_amp == 'apex'` -> `use_amp == 'apex'`).""",
    before="""
import torch

try:
    from apex import amp
    from apex.parallel import DistributedDataParallel as ApexDDP
    has_apex = True
except ImportError:
    has_apex = False


def train(args, model, optimizer, loader):
    if has_apex and args.fp16:
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    if has_apex:
        model = ApexDDP(model, delay_allreduce=True)
    for x in loader:
        loss = model(x).sum()
        if has_apex and args.fp16:
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
        else:
            loss.backward()
        optimizer.step()""",
    after="""
import torch

from torch.nn.parallel import DistributedDataParallel as ApexDDP


def train(args, model, optimizer, loader):
    scaler = torch.amp.GradScaler("cuda", enabled=bool(args.fp16))
    model = ApexDDP(model, broadcast_buffers=False, find_unused_parameters=True)
    for x in loader:
        with torch.autocast("cuda", dtype=torch.float16, enabled=bool(args.fp16)):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()""")

ENABLED_NOT_BOOL = rule(
    "A2A702", "autocast-enabled-not-bool", "`enabled=` of autocast / GradScaler may not be a bool",
    fixes=False, severity=WARNING,
    why="""
`torch.autocast(..., enabled=x)` raises `TypeError: ... must be bool` when it is entered unless `x` is a
bool, and `GradScaler(enabled=x).is_enabled()` returns `x` as given, so an autocast fed from it raises too.
A string-valued flag (`--fp16 O1` with `default=""`), `None` or an int reaches it as such. Pass
`bool(...)`, or a comparison, `not`, a `store_true` flag, `scaler.is_enabled()` of a bool-enabled scaler.
The lint reports what the module shows may not be a bool (a literal, an option declared without a
`store_true`-like action, a name compared with a string such as `args.fp16 != "O0"`, an `and`/`or` that can
return such an operand); a flag parsed in another file is not reported (the rewrite itself still wraps
whatever it cannot prove in `bool(...)`).""",
    before="""
import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--fp16", default="")


def step(model, x, args):
    with torch.autocast("cuda", dtype=torch.float16, enabled=args.fp16):
        loss = model(x).mean()
    return loss""",
    after="""
with torch.autocast("cuda", dtype=torch.float16, enabled=bool(args.fp16)):
    loss = model(x).mean()""")

APEX_MODE_NO_AMP = rule(
    "A2A703", "apex-mode-without-mixed-precision", "an `apex` AMP choice is still offered but no longer selects mixed precision",
    fixes=False, severity=WARNING,
    why="""
A migrated mode switch still accepts `apex` (an argparse `choices`/`default`, or `use_amp = 'apex'`) while
no code compares the selector with `apex` any more, or the only comparisons left guard fp32 code: that
choice now trains in float32 (often logged as "AMP not enabled"). Make the apex choice select the native
value. Limits: the lint reads one module; it reports a selector that is a plain name set to the apex value
in this module, or an option of this module whose choices/default name it, and only when the same
selector is compared with a native value whose branch reaches autocast or a GradScaler.""",
    before="""
import argparse

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--amp", default="apex", choices=["apex", "native", "none"])
    args = parser.parse_args()
    model = torch.nn.Linear(4, 4)
    scaler = None
    if args.amp == "native":
        scaler = torch.amp.GradScaler("cuda")
    with torch.autocast("cuda", enabled=args.amp == "native"):
        loss = model(torch.randn(8, 4)).mean()
    return loss, scaler""",
    after="""
parser.add_argument("--amp", choices=["native", "none"], default="native")
...
if args.amp == "native":
    scaler = torch.amp.GradScaler("cuda")""")
