"""Findings say what the rewrite wrote: A2A112 names the scaler it reads (`scalers[k]` with one
GradScaler per loss), A2A111 says when a mode switch's apex choice was re-routed (A2A130)."""
import os
import subprocess
import sys

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures")


def _check(*rel):
    paths = [os.path.join(FIXTURES, r) for r in rel]
    res = subprocess.run([sys.executable, "-m", "migrate", "check", *paths], capture_output=True, text=True)
    assert res.returncode == 1, res.stdout + res.stderr
    return res.stdout


def test_get_scale_names_the_scaler_of_each_loss():
    out = _check("amp_losses/gan_critic_every_step.before.py", "amp/internals.before.py")
    assert "A2A112 [*] `_amp_state.loss_scalers[0].loss_scale()` -> `scalers[0].get_scale()`" in out, out
    assert "A2A112 [*] `_amp_state.loss_scalers[1].loss_scale()` -> `scalers[1].get_scale()`" in out, out
    assert "A2A112 [*] `_amp_state.loss_scalers[0].loss_scale()` -> `scaler.get_scale()`" in out, out
    assert "`scaler.get_scale()`" not in [ln for ln in out.splitlines() if "gan_critic" in ln and "A2A112" in ln]


def test_removed_apex_branch_says_the_apex_choice_now_selects_native():
    out = _check("amp_modes/apex_native_none_switch.before.py")
    line = next(ln for ln in out.splitlines() if "A2A111" in ln)
    assert "the apex choice now selects it (A2A130)" in line and "select it instead of apex" not in line, out
    assert "A2A130" in out


PROBED = '''import torch

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
            scaler.update()
'''


def test_removed_apex_branch_without_a_reroute_keeps_its_text(tmp_path):
    (tmp_path / "train.py").write_text(PROBED)
    res = subprocess.run([sys.executable, "-m", "migrate", "check", str(tmp_path)], capture_output=True, text=True)
    lines = [ln for ln in res.stdout.splitlines() if "A2A111" in ln]
    assert len(lines) == 2 and all("(select it instead of apex)" in ln for ln in lines), res.stdout
    assert "A2A130" not in res.stdout
