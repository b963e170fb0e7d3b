"""A second loss computed after the first loss's backward-helper call, from a tensor of the first region
(`fake`): the helper call stays outside every region like a direct backward, so `loss_D` gets a region of
its own after it (it was left outside autocast, fp32 where apex O1 ran fp16). Two losses sharing a forward
before either backward get one region over both; when that region would grow over a statement that is no
part of the second loss and calls something, the module is refused (A2A116, A2A117), byte-identical."""
import subprocess
import sys
import textwrap

import pytest

SRC = '''
import torch
from apex import amp


def loss_backward(fp16, loss, optimizer):
    optimizer.zero_grad()
    with amp.scale_loss(loss, optimizer) as scaled_loss:
        scaled_loss.backward()
    optimizer.step()


def train(args, netG, netD, optG, optD, loader):
    [netG, netD], [optG, optD] = amp.initialize([netG, netD], [optG, optD], opt_level="O1")
    for x, z in loader:
        fake = netG(z)
        loss_G = -netD(fake).mean()
        loss_backward(args.fp16, loss_G, optG)
        loss_D = netD(fake.detach()).mean() - netD(x).mean()
        loss_backward(args.fp16, loss_D, optD)
'''


def _opener(text, stmt):
    lines = text.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.strip().startswith(stmt))
    indent = len(lines[at]) - len(lines[at].lstrip())
    return next(ln for ln in reversed(lines[:at]) if len(ln) - len(ln.lstrip()) < indent).strip()


def test_second_loss_gets_a_region_or_the_module_is_refused(tmp_path):
    (tmp_path / "gan.py").write_text(textwrap.dedent(SRC).lstrip())
    subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(tmp_path)], capture_output=True, text=True)
    text = (tmp_path / "gan.py").read_text()
    assert "from apex import amp" not in text, text
    for stmt in ("fake = ", "loss_G = ", "loss_D = "):
        assert _opener(text, stmt).startswith("with torch.autocast("), text
    # two regions: the generator's helper call (its backward and step) stays outside both
    assert text.count("with torch.autocast(") == 2, text
    assert _opener(text, "loss_backward(args.fp16, loss_G") == "for x, z in loader:", text
    again = subprocess.run([sys.executable, "-m", "migrate", "rewrite", "--diff", str(tmp_path)], capture_output=True,
                           text=True)
    assert again.stdout.count("+++") == 0, again.stdout


MERGED = '''
import torch
from apex import amp


def loss_backward(loss, optimizer):
    optimizer.zero_grad()
    with amp.scale_loss(loss, optimizer) as scaled_loss:
        scaled_loss.backward()
    optimizer.step()


def train(netG, netD, optG, optD, loader, log):
    [netG, netD], [optG, optD] = amp.initialize([netG, netD], [optG, optD], opt_level="O1")
    for x, z in loader:
        fake = netG(z)
        loss_G = -netD(fake).mean()
        {between}
        loss_D = netD(fake.detach()).mean() - netD(x).mean()
        loss_backward(loss_G, optG)
        loss_backward(loss_D, optD)
'''


def test_losses_sharing_a_forward_get_one_region(tmp_path):
    (tmp_path / "gan.py").write_text(textwrap.dedent(MERGED.format(between="n = 1")).lstrip())
    subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(tmp_path)], capture_output=True, text=True)
    text = (tmp_path / "gan.py").read_text()
    assert "apex" not in text and text.count("with torch.autocast(") == 1, text
    for stmt in ("fake = ", "loss_G = ", "n = 1", "loss_D = "):
        assert _opener(text, stmt).startswith("with torch.autocast("), text


def test_a_call_the_merged_region_would_grow_over_refuses(tmp_path):
    src = textwrap.dedent(MERGED.format(between="log(loss_G)")).lstrip()
    (tmp_path / "gan.py").write_text(src)
    res = subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(tmp_path)], capture_output=True, text=True)
    out = res.stdout + res.stderr
    assert (tmp_path / "gan.py").read_text() == src, out
    assert "A2A116" in out and "`log(loss_G)` (line 17)" in out and "A2A117" in out, out
