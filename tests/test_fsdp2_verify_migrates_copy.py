"""`apex2amp verify --target fsdp2 ORIGINAL` (no MIGRATED folder): the copy is migrated to FSDP2 with
verify's --dtype, then both sides run under torchrun x2 on the CPU; the target also comes from
`[tool.apex2amp]` as it does for rewrite."""
import json
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEGACY = os.path.join(REPO, "fixtures", "runnable_fsdp2", "apex_o2_layers", "legacy")

pytestmark = pytest.mark.slow


def _verify(original, extra, json_path):
    return subprocess.run(
        [sys.executable, "-m", "migrate", "verify", *extra, str(original), "--entry", "train.py", "--steps", "2",
         "--nproc", "2", "--device", "cpu", "--dtype", "bf16", "--mode", "", "--json", str(json_path),
         "--", "--backend", "gloo", "--device", "cpu"],
        capture_output=True, text=True, timeout=400,
        env=dict(os.environ, PYTHONPATH=REPO, OMP_NUM_THREADS="1", APEX2AMP_NO_CACHE="1"))


def _migrated_text(verdict):
    with open(os.path.join(verdict["migrated"], "train.py"), encoding="utf-8") as fh:
        return fh.read()


def test_verify_target_fsdp2_migrates_the_copy_to_fully_shard_and_passes(tmp_path):
    out = tmp_path / "v.json"
    proc = _verify(LEGACY, ["--target", "fsdp2"], out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "(--target fsdp2, bfloat16)" in proc.stdout and "fidelity tolerance applies" in proc.stdout
    verdict = json.loads(out.read_text())
    assert verdict["passed"] and verdict["target"] == "fsdp2"
    assert verdict["launchers"]["migrated"] == "torchrun" and verdict["nproc"] == 2
    text = _migrated_text(verdict)
    assert "for block in model.layers:\n        fully_shard(block, mp_policy=mp_policy)" in text
    assert "param_dtype=torch.bfloat16" in text and "DistributedDataParallel" not in text
    assert {row["rank"] for row in verdict["rows"]} == {0, 1}


def test_verify_takes_the_target_from_pyproject_like_rewrite(tmp_path):
    original = tmp_path / "legacy"
    shutil.copytree(LEGACY, original)
    (original / "pyproject.toml").write_text('[tool.apex2amp]\ntarget = "fsdp2"\n')
    out = tmp_path / "v.json"
    proc = _verify(original, [], out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    verdict = json.loads(out.read_text())
    assert verdict["target"] == "fsdp2" and "fully_shard(model, mp_policy=mp_policy)" in _migrated_text(verdict)
