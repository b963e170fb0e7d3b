"""Resuming from apex FusedAdam/FusedAdagrad checkpoints after the optimizer became torch's (A2A324,
`apex2amp convert-checkpoint`). The apex state dicts are built by hand in apex's layout
(apex/optimizers/fused_adam.py: `group["step"]` per param group, `state[p]` = exp_avg, exp_avg_sq;
fused_adagrad.py: `state[p]` = sum, no step), then loaded into the optimizer the migrated code builds."""
import os
import subprocess
import sys

import pytest

from golden import check_case, collect
from migrate.engine import rewrite_source

torch = pytest.importorskip("torch")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BUILD = '''
import torch
from apex.optimizers import FusedAdam, FusedAdagrad


def build(model):
    optimizer = FusedAdam(model.parameters(), lr=1e-3, betas=(0.0, 0.99))
    return optimizer


def build_adagrad(model):
    optimizer = FusedAdagrad(model.parameters(), lr=0.1)
    return optimizer
'''


@pytest.mark.parametrize("case", collect(["modules_resume"]), ids=lambda c: c.id)
def test_golden_modules_resume(case):
    check_case(case)


def _migrated():
    res = rewrite_source(BUILD)
    assert "apex" not in res.new_text, res.new_text
    ns = {}
    exec(compile(res.new_text, "migrated.py", "exec"), ns)
    return ns


def _apex_fused_adam_state(model, step):
    """optimizer.state_dict() of apex FusedAdam after `step` steps (capturable=False)."""
    params = list(model.parameters())
    return {"state": {i: {"exp_avg": torch.full_like(p, 0.1), "exp_avg_sq": torch.full_like(p, 0.01)}
                      for i, p in enumerate(params)},
            "param_groups": [{"lr": 1e-3, "bias_correction": True, "betas": (0.0, 0.99), "eps": 1e-8,
                              "weight_decay": 0.0, "step": step, "params": list(range(len(params)))}]}


def _apex_fused_adagrad_state(model):
    params = list(model.parameters())
    return {"state": {i: {"sum": torch.full_like(p, 0.5)} for i, p in enumerate(params)},
            "param_groups": [{"lr": 0.1, "eps": 1e-10, "weight_decay": 0.0, "params": list(range(len(params)))}]}


def _convert(tmp_path, ckpt):
    src, dst = tmp_path / "old.pt", tmp_path / "new.pt"
    torch.save(ckpt, src)
    proc = subprocess.run([sys.executable, "-m", "migrate", "convert-checkpoint", str(src), str(dst)],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return torch.load(dst, weights_only=False), proc.stdout


def _train_step(model, optimizer):
    optimizer.zero_grad()
    model(torch.randn(3, 4)).sum().backward()
    optimizer.step()


def test_apex_fused_adam_state_loads_after_convert(tmp_path):
    ns = _migrated()
    model = torch.nn.Linear(4, 2)
    old = {"model": model.state_dict(), "optimizer": _apex_fused_adam_state(model, step=7), "epoch": 3}
    with pytest.raises(KeyError, match="step"):
        ns["build"](model).load_state_dict(old["optimizer"])  # what the migrated resume does unconverted
    new, out = _convert(tmp_path, old)
    assert "FusedAdam" in out and new["epoch"] == 3
    optimizer = ns["build"](model)
    optimizer.load_state_dict(new["optimizer"])
    assert "step" not in optimizer.param_groups[0]
    _train_step(model, optimizer)
    assert float(optimizer.state[model.weight]["step"]) == 8.0
    assert torch.isfinite(model.weight).all()


def test_apex_fused_adagrad_state_loads_after_convert(tmp_path):
    ns = _migrated()
    model = torch.nn.Linear(4, 2)
    old = {"optim": _apex_fused_adagrad_state(model)}
    with pytest.raises(KeyError, match="step"):
        ns["build_adagrad"](model).load_state_dict(old["optim"])
    new, _ = _convert(tmp_path, old)
    optimizer = ns["build_adagrad"](model)
    optimizer.load_state_dict(new["optim"])
    _train_step(model, optimizer)
    assert float(optimizer.state[model.weight]["step"]) == 1.0
    assert torch.isfinite(model.weight).all()


def test_torch_optimizer_state_is_not_fused_state(tmp_path):
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    _train_step(model, optimizer)
    src, dst = tmp_path / "old.pt", tmp_path / "new.pt"
    torch.save({"optimizer": optimizer.state_dict()}, src)
    proc = subprocess.run([sys.executable, "-m", "migrate", "convert-checkpoint", str(src), str(dst)],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2 and "nothing to convert" in proc.stdout + proc.stderr


def test_resume_finding_at_each_load():
    res = rewrite_source(BUILD + "\n\nopt = FusedAdam([torch.nn.Parameter(torch.ones(1))])\n"
                         "opt.load_state_dict(torch.load('c.pt'))\n")
    lines = [f.line for f in res.findings if f.code == "A2A324"]
    assert lines == [17], [(f.line, f.code) for f in res.findings]


RESUME = '''
import torch
from apex.optimizers import FusedAdam, FusedAdagrad


def resume(model, state):
    optimizer = FusedAdam(model.parameters(), lr=1e-3, betas=(0.0, 0.99))
    optimizer.load_state_dict(state["optimizer"])
    return optimizer


def resume_adagrad(model, state):
    optim = FusedAdagrad(model.parameters(), lr=0.1)
    optim.load_state_dict(state["optim"])
    return optim
'''


def test_migrated_resume_loads_apex_and_torch_checkpoints():
    """The load in the migrated file goes through the added helper: an apex-era state (the step per param
    group) and a state saved by the migrated torch optimizer both resume, and training steps on."""
    res = rewrite_source(RESUME)
    assert "from apex" not in res.new_text and res.new_text.count("apex_fused_optimizer_state(state[") == 2
    assert [f.fixed for f in res.findings if f.code == "A2A324"] == [True, True]
    ns = {}
    exec(compile(res.new_text, "migrated.py", "exec"), ns)
    model = torch.nn.Linear(4, 2)
    optimizer = ns["resume"](model, {"optimizer": _apex_fused_adam_state(model, step=7)})
    _train_step(model, optimizer)
    assert float(optimizer.state[model.weight]["step"]) == 8.0
    again = ns["resume"](model, {"optimizer": optimizer.state_dict()})  # a checkpoint of the migrated run
    _train_step(model, again)
    assert float(again.state[model.weight]["step"]) == 9.0
    adagrad = ns["resume_adagrad"](model, {"optim": _apex_fused_adagrad_state(model)})
    _train_step(model, adagrad)
    assert float(adagrad.state[model.weight]["step"]) == 1.0 and torch.isfinite(model.weight).all()
