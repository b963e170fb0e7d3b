"""An early exit between the loss and its backward (codemods/amp_region_extend.py): inside the autocast
region when nothing before it in the same pass stepped or ran a backward, else refused (A2A142) with the
exit named and the file left byte-identical."""
import os
import subprocess
import sys
import textwrap

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "amp_regions")

CONTINUE = '''
import torch
from apex import amp


def train(model, optimizer, loader):
    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    for x, y in loader:
        out = model(x)
        loss = torch.nn.functional.mse_loss(out, y)
        if torch.isnan(loss):
            continue
        loss = loss * 0.5
        optimizer.zero_grad()
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()
'''


def _run(tmp_path, src, *extra):
    (tmp_path / "train.py").write_text(src)
    res = subprocess.run([sys.executable, "-m", "migrate", *extra, str(tmp_path)], capture_output=True, text=True)
    return (tmp_path / "train.py").read_text(), res.stdout + res.stderr


def test_a_continue_sits_inside_the_region(tmp_path):
    text, out = _run(tmp_path, textwrap.dedent(CONTINUE).lstrip(), "rewrite")
    assert "from apex" not in text, out
    region = text.split("with torch.autocast(")[1].split("scaler.scale(loss)")[0]
    assert "out = model(x)" in region and "continue" in region and "loss = loss * 0.5" in region, text


def test_an_exit_after_a_step_in_the_same_pass_is_refused_with_its_line(tmp_path):
    with open(os.path.join(FIXTURES, "early_exit_after_a_step_in_the_iteration.unchanged.py"), encoding="utf-8") as fh:
        src = fh.read()
    text, out = _run(tmp_path, src, "rewrite")
    assert text == src, out
    assert "A2A142" in out and "the early exit at line 17 stays outside" in out and "A2A117" in out, out
