"""verify's apex emulation and step grouping: bound optimizer.step (LR schedulers), steps grouped by each
optimizer's own step() on both sides (alternating critic/generator, in-process restarts), hand-written scalers."""
import os
import textwrap

import pytest

pytest.importorskip("torch")

from migrate.verify import run_side, verify  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALT = os.path.join(ROOT, "fixtures", "runnable", "alternating_steps")


def quiet(*a, **k):
    pass


def test_alternating_optimizers_restart_and_lr_scheduler_are_bitwise_equal():
    # 2 runs x (4 critic steps + 2 generator steps); amp.initialize is called again by the second run
    verdict = verify(os.path.join(ALT, "legacy"), os.path.join(ALT, "migrated"), entry="train.py", steps=12,
                     device="cpu", args=["--iters", "4", "--restarts", "2"], echo=quiet)
    assert verdict["passed"], verdict["reasons"]
    assert verdict["max_rel_diff"] == 0.0 and len(verdict["rows"]) == 12
    assert all(len(r["original"]) == 1 for r in verdict["rows"])  # one loss per optimizer step


BOUND_STEP = textwrap.dedent('''
    import inspect, torch, torch.nn as nn
    from apex import amp
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = amp.initialize(model, opt, opt_level="O2")
    assert inspect.ismethod(opt.step) and opt.step.__self__ is opt
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: 0.5 ** e)
    for _ in range(2):
        opt.zero_grad()
        with amp.scale_loss(model(torch.randn(4, 3)).float().pow(2).mean(), opt) as s:
            s.backward()
        opt.step()
        sched.step()
    try:
        amp.initialize(nn.Linear(3, 1), opt, opt_level="O1")
    except RuntimeError as e:
        assert "only be passed through amp.initialize once" in str(e)
    print("BOUND-OK", opt.param_groups[0]["lr"])
''')


def test_emulated_step_is_a_bound_method_lr_scheduler_wraps_it(tmp_path):
    (tmp_path / "t.py").write_text(BOUND_STEP)
    side = run_side(str(tmp_path), "t.py", steps=0)
    assert "BOUND-OK 0.025" in side.output, side.output


HAND_SCALER = textwrap.dedent('''
    import torch, torch.nn as nn, torch.nn.functional as F
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1)).half()
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    scale = 2.0 ** 16
    g = torch.Generator().manual_seed(3)
    for i in range(6):
        opt.zero_grad()
        x, y = torch.randn(16, 8, generator=g).half(), torch.randn(16, 1, generator=g) * 4
        loss = F.mse_loss(model(x).float(), y)
        (loss * scale).backward()
        grads = [p.grad for p in model.parameters()]
        if not all(torch.isfinite(gr).all() for gr in grads):
            scale /= 2
            print("SKIP", i, repr(loss.item()))
            continue
        for gr in grads:
            gr.div_(scale)
        opt.step()
        print("STEP", i, repr(loss.item()))
''')


def test_hand_written_scaler_records_unscaled_losses_and_separate_skipped_steps(tmp_path):
    (tmp_path / "t.py").write_text(HAND_SCALER)
    side = run_side(str(tmp_path), "t.py", steps=0)  # no cut: every print is seen
    printed = [line.split() for line in side.output.splitlines() if line.startswith(("SKIP", "STEP"))]
    records = side.records[0]
    assert any(kind == "SKIP" for kind, _, _ in printed) and any(kind == "STEP" for kind, _, _ in printed)
    # the program's last iteration ends the run only at its step; a trailing skip never closes a step
    expected = printed if printed[-1][0] == "STEP" else printed[:-1]
    assert [(r["losses"], r["skipped"]) for r in records] == [
        ([float(v)], kind == "SKIP") for kind, _, v in expected], side.output
    scales = [r["scale"] for r in records]
    assert scales[0] == 2.0 ** 16 and scales == sorted(scales, reverse=True)
