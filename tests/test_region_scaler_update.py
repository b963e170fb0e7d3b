"""Which `x.update(...)` ends an autocast region (codemods/region_scaler_update.py): the receiver is resolved
to a GradScaler (under any name) or to another object; an unresolved one is taken for a scaler unless the
call cannot be `GradScaler.update(new_scale=None)`."""
import subprocess
import sys
import textwrap

SRC = '''
import torch
from apex import amp
{imports}

{classes}
def train(model, optimizer, loader):
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    {setup}
    for x, y in loader:
        out = model(x)
        {between}
        loss = torch.nn.functional.mse_loss(out, y)
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()
'''

TRACKER = '''class ScaleTracker:
    def __init__(self):
        self.seen = 0

    def update(self):
        self.seen += 1

'''


def _rewrite(tmp_path, **parts):
    fields = {"imports": "", "classes": "", "setup": "pass", "between": "pass", **parts}
    src = textwrap.dedent(SRC.format(**fields)).lstrip()
    (tmp_path / "train.py").write_text(src)
    res = subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(tmp_path)], capture_output=True, text=True)
    return src, (tmp_path / "train.py").read_text(), res.stdout + res.stderr


def _inside_region(text, stmt):
    lines = text.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.strip() == stmt)
    indent = len(lines[at]) - len(lines[at].lstrip())
    opener = next(ln for ln in reversed(lines[:at]) if len(ln) - len(ln.lstrip()) < indent)
    return opener.strip().startswith("with torch.autocast(")


def test_a_tracker_named_like_a_scaler_sits_in_the_region(tmp_path):
    # `scale_tracker.update()` takes no argument, like GradScaler.update(), and its name holds "scal": the
    # old name heuristic stopped the region there and refused; the receiver resolves to a class of this module
    _, text, out = _rewrite(tmp_path, classes=TRACKER, setup="scale_tracker = ScaleTracker()",
                            between="scale_tracker.update()")
    assert "from apex" not in text, out
    for stmt in ("out = model(x)", "scale_tracker.update()", "loss = torch.nn.functional.mse_loss(out, y)"):
        assert _inside_region(text, stmt), text


def test_a_grad_scaler_under_an_unusual_name_ends_the_region(tmp_path):
    # `gs = GradScaler()` updated with a new scale between the forward and the loss: no region may hold it
    src, text, out = _rewrite(tmp_path, imports="from torch.cuda.amp import GradScaler", setup="gs = GradScaler()",
                              between="gs.update(2.0 ** 16)")
    assert "amp.initialize(" in text and "amp.scale_loss(" in text and "autocast" not in text, text  # amp kept
    assert "A2A142" in out and "A2A117" in out, out


def test_an_unresolved_receiver_with_one_argument_is_taken_for_a_scaler(tmp_path):
    src, text, out = _rewrite(tmp_path, between="meter.update(loss_value)")
    assert text == src and "A2A142" in out, out


def test_an_unresolved_receiver_with_a_meters_arguments_sits_in_the_region(tmp_path):
    # two positional arguments: no GradScaler.update(new_scale=None) call
    _, text, out = _rewrite(tmp_path, between="meter.update(out.sum().item(), x.size(0))")
    assert "from apex" not in text, out
    assert _inside_region(text, "meter.update(out.sum().item(), x.size(0))"), text
