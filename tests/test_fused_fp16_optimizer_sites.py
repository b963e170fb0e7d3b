"""apex < 0.1's FP16_Optimizer + FusedAdam through the CLI, beyond the golden and runnable fixtures: the
FusedAdam of such a module is never rewritten on its own (its wrapper's step() hands it grads=, which a
torch optimizer does not take), bf16 needs no scaler, --min-torch picks foreach, and a second fp16 cast
keeps everything as it is."""
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "runnable_manual",
                    "fused_fp16_optimizer", "legacy", "train.py")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _rewrite(tmp_path, *args, source=None):
    path = tmp_path / "train.py"
    if source is None:
        shutil.copy(ROOT, path)
    else:
        path.write_text(source, encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "migrate", "rewrite", "--format", "json", "--no-cache", *args,
                           str(path)], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": REPO})
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    (report,) = json.loads(proc.stdout)["files"]
    return path.read_text(encoding="utf-8"), report["findings"]


def _legacy():
    with open(ROOT, encoding="utf-8") as fh:
        return fh.read()


def test_fused_adam_stays_with_its_wrapper_when_the_wrapper_rule_is_off(tmp_path):
    out, findings = _rewrite(tmp_path, "--select", "A2A3")
    assert "FusedAdam(optimizer_grouped_parameters" in out and "torch.optim.AdamW(optimizer_grouped_parameters,\n" \
        not in out
    assert any(f["code"] == "A2A304" and "apex < 0.1" in f["message"] for f in findings)


def test_bf16_needs_no_scaler(tmp_path):
    out, findings = _rewrite(tmp_path, "--dtype", "bf16")
    assert 'torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.fp16)' in out
    code = out.split('"""', 2)[2]  # after the module docstring
    assert "GradScaler" not in code and "FP16_Optimizer" not in code and ".half()" not in code
    assert "        loss.backward()\n" in out and "            optimizer.step()\n" in out
    assert any(f["code"] == "A2A501" and f["fixed"] for f in findings)


def test_min_torch_below_2_uses_foreach(tmp_path):
    out, _ = _rewrite(tmp_path, "--min-torch", "1.13")
    assert "foreach=True" in out and "fused=True" not in out


def test_another_fp16_cast_keeps_the_file_as_it_is(tmp_path):
    source = _legacy().replace("        input_ids, input_mask, label_ids = batch\n",
                               "        input_ids, input_mask, label_ids = batch\n"
                               "        if args.fp16:\n            input_mask = input_mask.half()\n")
    out, findings = _rewrite(tmp_path, source=source)
    assert out == source
    msgs = [f["message"] for f in findings if f["code"] == "A2A502"]
    assert len(msgs) == 2 and all("tensors other than the model to fp16 (input_mask.half())" in m for m in msgs)
    assert any(f["code"] == "A2A304" for f in findings)
