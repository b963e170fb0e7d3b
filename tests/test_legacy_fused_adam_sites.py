"""apex < 0.1's FusedAdam(bias_correction=False, max_grad_norm=...) under its FP16_Optimizer through the CLI,
beyond the golden and runnable fixtures: bf16 needs no scaler (the port stays), the port's name already taken
in the file keeps everything as it is, and a second rewrite adds no second port."""
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEGACY = os.path.join(REPO, "fixtures", "runnable_manual", "fused_fp16_nobias", "legacy", "train.py")


def _rewrite(tmp_path, source, *args):
    path = tmp_path / "train.py"
    path.write_text(source, encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "migrate", "rewrite", "--format", "json", "--no-cache", *args,
                           str(path)], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": REPO})
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    (report,) = json.loads(proc.stdout)["files"]
    return path.read_text(encoding="utf-8"), report["findings"]


def _legacy():
    with open(LEGACY, encoding="utf-8") as fh:
        return fh.read()


def test_bf16_keeps_the_port_without_a_scaler(tmp_path):
    out, findings = _rewrite(tmp_path, _legacy(), "--dtype", "bf16")
    code = out.split('"""', 2)[2]
    assert "GradScaler(" not in code and "FP16_Optimizer(" not in code and "scaler." not in code
    assert "optimizer = LegacyFusedAdam(optimizer_grouped_parameters," in out and out.count("class LegacyFusedAdam(") == 1
    assert 'torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.fp16)' in out
    assert any(f["code"] == "A2A306" and f["fixed"] for f in findings)


def test_a_taken_name_keeps_the_file_as_it_is(tmp_path):
    source = _legacy().replace("\n\ndef main():", "\n\nLegacyFusedAdam = None  # something else of the project\n\n\n"
                                                   "def main():")
    out, findings = _rewrite(tmp_path, source)
    assert out == source
    msgs = [f["message"] for f in findings if f["code"] == "A2A502"]
    assert len(msgs) == 2 and all("the name LegacyFusedAdam is taken" in m for m in msgs)


def test_second_rewrite_is_a_no_op(tmp_path):
    once, _ = _rewrite(tmp_path, _legacy())
    twice, findings = _rewrite(tmp_path, once)
    assert twice == once and not any(f["fixed"] for f in findings)
