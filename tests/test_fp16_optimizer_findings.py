"""FP16_Optimizer calls the rewrite does not handle each get an A2A502 finding at their line, through the
CLI: a project-local copy of apex's class, and apex < 0.1's FusedAdam wrapper (`apex.optimizers`), with
the GradScaler their loss-scale arguments map to; DeepSpeed's class of the same name is not reported."""
import json
import os
import subprocess
import sys

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "manual_scaling")


def _findings(name):
    res = subprocess.run([sys.executable, "-m", "migrate", "check", "--format", "json", "--no-cache",
                          os.path.join(FIXTURES, name)], capture_output=True, text=True)
    assert res.returncode == 1, res.stdout + res.stderr
    (report,) = json.loads(res.stdout)["files"]
    return [f for f in report["findings"] if f["code"] == "A2A502"]


def test_a_vendored_copy_is_reported_once_and_deepspeed_is_not():
    found = _findings("fp16_optimizer_vendored.unchanged.py")
    assert [f["line"] for f in found] == [19]
    msg = found[0]["message"]
    assert "`fp16.FP16_Optimizer`" in msg
    # the call's own settings: dynamic under the flag, else the static scale it was given
    assert ("GradScaler(\"cuda\", init_scale=2.0**32 if args.dynamic_loss_scale else args.loss_scale, "
            "growth_interval=1000 if args.dynamic_loss_scale else 2**30)") in msg
    assert "`if scaler.get_scale() < 1: scaler.update(1.0)`" in msg  # the copy's floor, kept
    assert "scaler.scale(loss).backward()" in msg


def test_the_fused_adam_wrapper_names_each_calls_scaler():
    found = {f["line"]: f["message"] for f in _findings("fp16_optimizer_fused_adam_wrapper.unchanged.py")}
    assert sorted(found) == [15, 17]
    assert 'GradScaler("cuda", init_scale=2.0**16, growth_interval=1000, enabled=<the fp16 flag>)' in found[15]
    assert 'GradScaler("cuda", init_scale=args.loss_scale, growth_interval=2**30, enabled=<the fp16 flag>)' in found[17]
    assert "max_grad_norm" in found[15]


def _all(name):
    res = subprocess.run([sys.executable, "-m", "migrate", "check", "--format", "json", "--no-cache",
                          os.path.join(FIXTURES, name)], capture_output=True, text=True)
    assert res.returncode == 1, res.stdout + res.stderr
    (report,) = json.loads(res.stdout)["files"]
    return report["findings"]


def test_a_fairseq_style_wrapper_names_each_methods_counterpart():
    found = _all("fairseq_style_wrapper.unchanged.py")
    (wrapper,) = [f for f in found if f["code"] == "A2A512"]
    msg = wrapper["message"]
    for part in ("optimizer.backward(loss) -> scaler.scale(loss).backward()",
                 "multiply_grads(c) and clip_grad_norm(n) -> scaler.unscale_(optimizer) once",
                 "raise FloatingPointError when a step was skipped and scaler.get_scale() <= args.min_loss_scale",
                 "save scaler.state_dict() beside the optimizer's"):
        assert part in msg, msg
    (scaler,) = [f for f in found if f["code"] == "A2A146"]
    # a window read from the config may be a float: GradScaler takes an int
    assert ('self.scaler = torch.amp.GradScaler("cuda", init_scale=cfg.init_scale, growth_factor=2.0, '
            "backoff_factor=0.5, growth_interval=int(cfg.window))") in scaler["message"]
    assert "floor" not in scaler["message"]  # this scaler has none


def test_a_plain_scaler_class_gets_no_fairseq_note():
    found = _all("scaler_class.unchanged.py")
    assert found and not any("Method by method" in f["message"] for f in found)
