"""A refused FP16_Optimizer's A2A502 lists each use of the optimizer in the module with its hand migration, line by
line (codemods/fp16_use_map.py): a project's copy of the class, and apex.fp16_utils' read for `.overflow`."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _a2a502(path):
    res = subprocess.run([sys.executable, "-m", "migrate", "check", "--format", "json", "--no-cache", str(path)],
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": HERE})
    (report,) = json.loads(res.stdout)["files"]
    (found,) = [f for f in report["findings"] if f["code"] == "A2A502"]
    return found["message"]


def test_a_vendored_copys_uses_each_get_their_line_and_mapping(tmp_path):
    src = tmp_path / "train.py"
    src.write_text(
        "import torch\nfrom fp16 import FP16_Module, FP16_Optimizer\n\n\n"
        "def main(args, model, loader, scheduler):\n"
        "    if args.fp16:\n"
        "        model = FP16_Module(model)\n"
        "        optim = FP16_Optimizer(torch.optim.Adam(model.parameters()), dynamic_loss_scale=True)\n"
        "    else:\n"
        "        optim = torch.optim.Adam(model.parameters())\n"
        "    optim.load_state_dict(torch.load(args.resume))\n"
        "    for x, y in loader:\n"
        "        optim.zero_grad()\n"
        "        loss = model(x, y)\n"
        "        if args.fp16:\n"
        "            optim.backward(loss, update_master_grads=False)\n"
        "            optim.clip_master_grads(clip=args.clip)\n"
        "            optim.update_master_grads()\n"
        "        else:\n"
        "            loss.backward()\n"
        "        optim.step()\n"
        "        if not optim.overflow:\n"
        "            scheduler.step()\n"
        "        print(optim.loss_scale)\n"
        "    torch.save(optim.state_dict(), args.out)\n", encoding="utf-8")
    msg = _a2a502(src)
    expect = [
        "(the FP16_Optimizer is made under `if args.fp16:`: create the scaler outside that `if`, with enabled=args.fp16",
        "line 7: `FP16_Module(model)` -> `model` (the model stays fp32)",
        "line 11: `optim.load_state_dict(torch.load(args.resume))` -> `optim.load_state_dict(torch.load(args.resume))` "
        "and `scaler.load_state_dict(<its saved state>)`",
        "line 16: `optim.backward(loss, update_master_grads=False)` -> `scaler.scale(loss).backward()`",
        "line 17: `optim.clip_master_grads(clip=args.clip)` -> `scaler.unscale_(optim)` then "
        "`torch.nn.utils.clip_grad_norm_([p for g in optim.param_groups for p in g[\"params\"]], args.clip)`",
        "line 18: `optim.update_master_grads()` -> removed (GradScaler keeps no master gradients)",
        "line 21: `optim.step()` -> `scale_before = scaler.get_scale(); scaler.step(optim); scaler.update()`",
        "line 22: `optim.overflow` -> `scaler.get_scale() < scale_before` (the step was skipped)",
        "line 24: `optim.loss_scale` -> `scaler.get_scale()`",
        "line 25: `optim.state_dict()` -> `optim.state_dict()`, and save `scaler.state_dict()` beside it",
    ]
    for piece in expect:
        assert piece in msg, (piece, msg)
    assert "zero_grad" not in msg.split("line by line")[1]  # unchanged uses are not listed


def test_apex_fp16_utils_refused_for_overflow_lists_its_uses():
    msg = _a2a502(os.path.join(HERE, "fixtures", "manual_scaling", "fp16_optimizer_overflow.unchanged.py"))
    assert "line 11: `optimizer.overflow` -> `scaler.get_scale() < scale_before` (the step was skipped)" in msg
    assert "line 10: `optimizer.step()` -> `scale_before = scaler.get_scale(); scaler.step(optimizer); " \
           "scaler.update()`" in msg
