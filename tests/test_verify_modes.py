"""verify in every mode: modes detected from the script's precision flags (or given, or configured), the
forward's precision checked per mode (a mode that became fp32 fails), and check's A2A7xx/A2A118 findings
on the migrated tree reported before running. Real CLI runs on the CPU of tiny fixtures."""
import json
import os
import shutil
import textwrap

import pytest

pytest.importorskip("torch")

from verify_cli import verify_cli  # noqa: E402

from migrate.verify.lints import wanted  # noqa: E402
from migrate.verify.modes import detect_checkpoint_args, detect_modes  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNNABLE = os.path.join(ROOT, "fixtures", "runnable")
RESUME = os.path.join(RUNNABLE, "resume_ckpt")


def _verify(*args, cwd=ROOT):
    return verify_cli(*args, cwd=cwd)


def _twin(tmp_path, name, edit=None):
    dst = tmp_path / name
    shutil.copytree(os.path.join(RESUME, "migrated"), dst)
    if edit:
        path = dst / "train.py"
        text = path.read_text()
        new = edit(text)
        assert new != text
        path.write_text(new)
    return dst


def test_modes_are_detected_from_precision_flags(tmp_path):
    assert detect_modes(os.path.join(RESUME, "legacy", "train.py"))[0] == ["", "--fp16"]
    assert detect_modes(os.path.join(RUNNABLE, "two_modules", "legacy", "train.py"))[0] == ["", "--amp"]
    assert detect_modes(os.path.join(RUNNABLE, "multi_model", "legacy", "train_gan.py"))[0] == [
        "--opt-level O0", "--opt-level O1"]
    assert detect_modes(os.path.join(ROOT, "fixtures", "demo", "train.py"))[0] == ["", "--fp16"]
    # the arguments already choose: the one given configuration
    assert detect_modes(os.path.join(RESUME, "legacy", "train.py"), ["--fp16"])[0] == [""]
    script = tmp_path / "t.py"
    script.write_text(textwrap.dedent("""
        import argparse
        p = argparse.ArgumentParser()
        p.add_argument("--precision", choices=["fp32", "fp16"], default="fp32")
        p.add_argument("--no-amp", action="store_false", dest="amp")
    """))
    assert detect_modes(str(script))[0] == ["", "--no-amp"]
    script.write_text("import argparse\np = argparse.ArgumentParser()\np.add_argument('--precision', "
                      "choices=['fp32', 'bf16'])\n")
    assert detect_modes(str(script))[0] == ["--precision fp32", "--precision bf16"]
    script.write_text("print('no flags')\n")
    assert detect_modes(str(script))[0] == [""]


def test_checkpoint_flags_are_detected_or_refused():
    save, resume, _ = detect_checkpoint_args(os.path.join(RESUME, "legacy", "train.py"))
    assert (save, resume) == ("--save {ckpt} --save-at {k}", "--resume {ckpt}")
    assert detect_checkpoint_args(os.path.join(ROOT, "fixtures", "demo", "train.py"))[:2] == ("", "--resume {ckpt}")
    save, resume, why = detect_checkpoint_args(os.path.join(RUNNABLE, "two_modules", "legacy", "train.py"))
    assert resume is None and "--resume-args" in why


def test_verify_reports_future_a2a7_codes():
    assert wanted("A2A118") and wanted("A2A701") and wanted("A2A704") and not wanted("A2A110")


def test_mode_that_became_fp32_fails_with_the_mode_named(tmp_path):
    broken = _twin(tmp_path, "fp32", lambda t: t.replace("enabled=args.fp16):", "enabled=False):"))
    out = tmp_path / "v.json"
    r = _verify("--entry", "train.py", "--steps", "3", "--json", str(out), os.path.join(RESUME, "legacy"),
                str(broken))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "mode '--fp16' became fp32" in r.stdout
    assert "verify: mode '' (the common arguments only): PASS; forward float32 -> float32" in r.stdout
    assert "verify: mode '--fp16': FAIL; forward float16 (autocast) -> float32" in r.stdout
    data = json.loads(out.read_text())
    assert [m["mode_args"] for m in data["modes"]] == ["", "--fp16"]
    assert [m["passed"] for m in data["modes"]] == [True, False]
    assert data["modes"][1]["precision"]["original"]["precision"] == "reduced"
    assert data["modes"][1]["precision"]["migrated"]["precision"] == "float32"
    assert not data["passed"] and data["mode_args"] == "--fp16"


def test_configured_mode_and_apex_still_used_in_the_migrated_tree(tmp_path):
    """[tool.apex2amp.verify] modes replace the detection; check's A2A118 on the migrated tree fails it."""
    original = tmp_path / "legacy"
    shutil.copytree(os.path.join(RESUME, "legacy"), original)
    (original / "pyproject.toml").write_text('[tool.apex2amp.verify]\nmodes = ["--fp16"]\n')
    leftover = _twin(tmp_path, "leftover", lambda t: t.replace(
        "import torch.nn as nn\n", "import torch.nn as nn\nimport apex\n\nAPEX_HOME = apex.__file__\n", 1))
    out = tmp_path / "v.json"
    r = _verify("--entry", "train.py", "--steps", "2", "--json", str(out), str(original), str(leftover))
    assert r.returncode == 1, r.stdout + r.stderr
    data = json.loads(out.read_text())
    assert [m["mode_args"] for m in data["modes"]] == ["--fp16"] and data["modes"][0]["passed"]
    assert {f["code"] for f in data["check_findings"]} == {"A2A118"}
    assert "static check: train.py:10:1: A2A118 apex name `apex` is still used" in r.stdout
    assert "verify: mode '--fp16': PASS" in r.stdout and "verify: FAIL" in r.stdout


def test_apex_o2_fp16_weights_count_as_reduced_precision():
    """O2 returns fp32 outputs from fp16 weights: still a mixed-precision mode, matched by autocast."""
    fx = os.path.join(RUNNABLE, "trainer_class")
    r = _verify("--entry", "train.py", "--steps", "2", os.path.join(fx, "legacy"), os.path.join(fx, "migrated"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "verify: mode '--fp16': PASS; forward float32 (float16 weights) -> float16 (autocast)" in r.stdout
