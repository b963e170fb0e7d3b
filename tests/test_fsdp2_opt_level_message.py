"""A2A108 under `--target fsdp2`: apex O2 becomes a MixedPrecisionPolicy with fp32 sharded masters (not
"the model stays fp32"); the default target keeps its fp32-weights message."""
import os
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEGACY = os.path.join(REPO, "fixtures", "runnable_fsdp2", "apex_o2_layers", "legacy", "train.py")

SINGLE_PROCESS_O2 = '''import torch
from apex import amp


def train(model, loader):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = amp.initialize(model, optimizer, opt_level="O2")
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()
'''


def _check(tmp_path, *extra):
    r = subprocess.run([sys.executable, "-m", "migrate", "check", *extra, "train.py"], capture_output=True,
                       text=True, cwd=tmp_path, env=dict(os.environ, PYTHONPATH=REPO, APEX2AMP_NO_CACHE="1"))
    assert r.returncode == 1, r.stdout + r.stderr
    return [line for line in r.stdout.splitlines() if " A2A108 " in line]


def test_o2_under_fsdp2_names_the_policy_and_the_fp32_sharded_masters(tmp_path):
    shutil.copy(LEGACY, tmp_path / "train.py")
    [line] = _check(tmp_path, "--target", "fsdp2", "--dtype", "bfloat16")
    assert "MixedPrecisionPolicy" in line and "fp32 sharded master parameters" in line
    assert "the model stays fp32 and runs under autocast" not in line
    [default] = _check(tmp_path)
    assert "the model stays fp32 and runs under autocast" in default


def test_o2_single_process_under_fsdp2_says_the_unsharded_file_stays_fp32(tmp_path):
    (tmp_path / "train.py").write_text(SINGLE_PROCESS_O2)
    r = subprocess.run([sys.executable, "-m", "migrate", "check", "--target", "fsdp2", "train.py"],
                       capture_output=True, text=True, cwd=tmp_path,
                       env=dict(os.environ, PYTHONPATH=REPO, APEX2AMP_NO_CACHE="1"))
    assert "A2A802" in r.stdout, r.stdout + r.stderr
    [line] = [x for x in r.stdout.splitlines() if " A2A108 " in x]
    assert "leaves the file unsharded" in line and "stays fp32 under autocast" in line


def test_explain_a2a108_describes_the_fsdp2_target():
    r = subprocess.run([sys.executable, "-m", "migrate", "explain", "A2A108"], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=REPO))
    assert r.returncode == 0 and "--target fsdp2" in r.stdout and "MixedPrecisionPolicy" in r.stdout
