"""apex2amp verify: real subprocess runs of the runnable fixtures (CPU simulation of CUDA, apex emulation)."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from migrate.verify import backward_inside_autocast, collect_losses, compare, run_side, verify
from migrate.verify.runner import detect_launcher
from verify_cli import verify_cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNNABLE = os.path.join(ROOT, "fixtures", "runnable")
STEPS = 4


def fx(*parts):
    return os.path.join(RUNNABLE, *parts)


@pytest.fixture(scope="module")
def accum_original():
    """The legacy single_accum run, shared by every comparison against it."""
    return collect_losses(fx("single_accum", "legacy"), "train.py", ["--fp16"], steps=STEPS)


def test_correct_twin_is_bitwise_equal(accum_original):
    migrated = collect_losses(fx("single_accum", "migrated"), "train.py", ["--fp16"], steps=STEPS)
    verdict = compare(accum_original, migrated, steps=STEPS)
    assert verdict["passed"], verdict["reasons"]
    assert verdict["max_rel_diff"] == 0.0
    rec = accum_original[0]
    assert len(rec) == STEPS and all(len(r["losses"]) == 2 for r in rec)  # accum=2: two backward passes per step
    assert rec[0]["scale"] == 65536.0 and not rec[0]["skipped"]
    assert backward_inside_autocast(fx("single_accum", "migrated", "train.py")) == []


# (bug, first divergent step expected; None = caught by the static check only)
BROKEN = [
    ("no_update", 1),
    ("clip_before_unscale", 1),
    ("double_step", 1),
    ("step_every_micro_batch", 0),
    ("half_model", 0),
]


@pytest.mark.parametrize("bug,first_step", BROKEN)
def test_broken_migration_fails_at_the_right_step(accum_original, bug, first_step):
    side = run_side(fx("single_accum", "broken", bug), "train.py", ["--fp16"], steps=STEPS)
    verdict = compare(accum_original, side.records, steps=STEPS)
    assert not verdict["passed"]
    assert verdict["first_divergent_step"] == first_step, verdict["reasons"]
    if bug == "no_update":  # the crash message is kept (was its own test, on the same run)
        message = side.error() or side.output
        assert "RuntimeError" in message and "step()" in message  # GradScaler refuses the second step/unscale_
        assert len(side.records[0]) == 1


def test_backward_inside_autocast_is_caught_statically():
    found = backward_inside_autocast(fx("single_accum", "broken", "backward_in_autocast", "train.py"))
    assert len(found) == 1 and "backward() inside an autocast region" in found[0]


def test_cli_pass_json_and_plot_message(tmp_path):
    out = tmp_path / "verdict.json"
    r = subprocess.run([sys.executable, "-m", "migrate", "verify", "--entry", "train.py", "--steps", str(STEPS),
                        "--json", str(out), "--plot", str(tmp_path / "curves.png"),
                        fx("two_modules", "legacy"), fx("two_modules", "migrated"), "--", "--amp"],
                       capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASS" in r.stdout and "simulated" in r.stdout.lower()
    data = json.loads(out.read_text())
    assert data["passed"] and data["simulated_cuda"] and data["apex"] == "emulated"
    assert [len(data["rows"]), data["first_divergent_step"]] == [STEPS, None]
    try:
        import matplotlib  # noqa: F401
        assert (tmp_path / "curves.png").exists()
    except ImportError:
        assert "matplotlib is not installed" in r.stderr


def test_cli_fail_exit_1_reports_step(tmp_path):
    out = tmp_path / "v.json"
    r = verify_cli("--entry", "train.py", "--steps", str(STEPS), "--json", str(out), fx("single_accum", "legacy"),
                   fx("single_accum", "broken", "backward_in_autocast"), "--", "--fp16", cwd=ROOT)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "backward() inside an autocast region" in r.stdout
    assert json.loads(out.read_text())["static_findings"]


def test_cli_exit_2_when_original_cannot_run(tmp_path):
    for side in ("a", "b"):
        (tmp_path / side).mkdir()
        (tmp_path / side / "train.py").write_text("import sys\nprint('boom: no data here')\nsys.exit(3)\n")
    r = subprocess.run([sys.executable, "-m", "migrate", "verify", "--entry", "train.py", "--steps", "2",
                        str(tmp_path / "a"), str(tmp_path / "b")], capture_output=True, text=True, cwd=ROOT,
                       timeout=300)
    assert r.returncode == 2
    assert "boom: no data here" in r.stderr and "could not run" in r.stdout


def test_multi_model_two_losses_two_optimizers():
    verdict = verify(fx("multi_model", "legacy"), fx("multi_model", "migrated"), entry="train_gan.py",
                     steps=STEPS, device="cpu", echo=lambda *a, **k: None)
    assert verdict["passed"], verdict["reasons"]
    # a step per optimizer step: errD (optimizerD.step), then errG (optimizerG.step)
    assert all(len(r["original"]) == 1 for r in verdict["rows"]) and len(verdict["rows"]) == STEPS


def test_launcher_detection():
    assert detect_launcher(fx("imagenet_like", "legacy", "main.py"), fx("imagenet_like", "migrated", "main.py"),
                           None) == "torchrun"
    assert detect_launcher(fx("single_accum", "legacy", "train.py"), fx("single_accum", "migrated", "train.py"),
                           None) == "python"


SHIM_SCRIPT = textwrap.dedent('''
    import torch, torch.nn as nn
    from apex import amp
    from apex.fp16_utils import FP16_Optimizer, to_python_float, network_to_half
    torch.manual_seed(0)
    # O2: fp16 model, fp32 BatchNorm, fp32 master weights, fp32 outputs
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = amp.initialize(model, opt, opt_level="O2")
    assert model[0].weight.dtype == torch.float16 and model[1].weight.dtype == torch.float32
    out = model(torch.randn(4, 4))
    assert out.dtype == torch.float32
    with amp.scale_loss(out.float().pow(2).mean(), opt) as s:
        s.backward()
    opt.step()
    assert all(p.dtype == torch.float32 for p in amp.master_params(opt))
    assert amp.state_dict() == {"loss_scaler0": {"loss_scale": 65536.0, "unskipped": 1}}
    # overflow: halve the scale and skip exactly the next step
    before = [p.detach().clone() for p in amp.master_params(opt)]
    with amp.scale_loss(model(torch.randn(4, 4)).float().sum() * float("inf"), opt) as s:
        s.backward()
    opt.step()
    assert all(torch.equal(a, b) for a, b in zip(before, amp.master_params(opt)))
    assert amp._amp_state.loss_scalers[0].loss_scale() == 32768.0
    amp.load_state_dict({"loss_scaler0": {"loss_scale": 128.0, "unskipped": 5}})
    assert amp._amp_state.loss_scalers[0]._unskipped == 5
    # return shapes, enabled=False
    m2 = nn.Linear(2, 2)
    assert amp.initialize(m2, enabled=False) is m2
    assert isinstance(amp.initialize([m2], [torch.optim.SGD(m2.parameters(), lr=1)], opt_level="O0")[1], list)
    assert to_python_float(torch.tensor(2.5)) == 2.5
    half = network_to_half(nn.Sequential(nn.Linear(2, 2)))
    fo = FP16_Optimizer(torch.optim.SGD(half.parameters(), lr=0.1), dynamic_loss_scale=True)
    fo.backward(half(torch.randn(3, 2)).float().sum())
    fo.clip_master_grads(1.0)
    fo.step()
    print("SHIM-OK")
''')


def test_apex_emulation_semantics(tmp_path):
    (tmp_path / "t.py").write_text(SHIM_SCRIPT)
    side = run_side(str(tmp_path), "t.py", steps=0)
    assert "SHIM-OK" in side.output, side.output


O2_RESTORE_SCRIPT = textwrap.dedent('''
    import torch, torch.nn as nn
    from apex import amp
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.0, momentum=0.9)
    model, opt = amp.initialize(model, opt, opt_level="O2")
    # a checkpoint loaded after initialize, before the first step (the usual resume order)
    model.load_state_dict({k: torch.full_like(v, 0.5) for k, v in model.state_dict().items()})
    assert all(p.dtype == torch.float16 for p in amp.master_params(opt))  # apex builds masters lazily
    with amp.scale_loss(model(torch.randn(3, 4).half()).float().sum(), opt) as s:
        s.backward()
    opt.step()
    assert all(bool((p == 0.5).all()) for p in model.parameters())
    assert all(p.dtype == torch.float32 and bool((p == 0.5).all()) for p in amp.master_params(opt))
    print("RESTORE-OK")
''')


def test_apex_emulation_o2_masters_start_from_a_checkpoint_loaded_after_initialize(tmp_path):
    """apex creates the O2 fp32 masters on the first zero_grad / backward / step: weights loaded into the
    model between `amp.initialize` and that call are what training continues from (an eager copy made in
    initialize would silently resume from the initial weights)."""
    (tmp_path / "t.py").write_text(O2_RESTORE_SCRIPT)
    side = run_side(str(tmp_path), "t.py", steps=0)
    assert "RESTORE-OK" in side.output, side.output


def test_self_migrating_path():
    verdict = verify(fx("single_accum", "legacy"), None, entry="train.py", steps=STEPS, device="cpu",
                     args=["--fp16"], echo=lambda *a, **k: None)
    assert verdict["passed"], verdict["reasons"]


@pytest.mark.slow
def test_torchrun_two_ranks_and_wrong_rank_mapping():
    args = ["--multiprocessing-distributed"]
    original = collect_losses(fx("imagenet_like", "legacy"), "main.py", args, steps=3, nproc=2)
    assert sorted(original) == [0, 1]
    good = collect_losses(fx("imagenet_like", "migrated"), "main.py", args, steps=3, nproc=2, launcher="torchrun")
    verdict = compare(original, good, steps=3)
    assert verdict["passed"], verdict["reasons"]
    bad = collect_losses(fx("imagenet_like", "broken", "wrong_rank"), "main.py", args, steps=3, nproc=2,
                         launcher="torchrun")
    verdict = compare(original, bad, steps=3)
    assert not verdict["passed"]
    assert (verdict["first_divergent_step"], verdict["first_divergent_rank"]) == (0, 1)
