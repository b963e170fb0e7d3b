"""verify's resume check: each side trains K steps, saves, restarts from its checkpoint and trains on; the
resumed runs must match each other and the uninterrupted run, loss scale included. Real CLI runs on the CPU
of the resume_ckpt fixture and of hand-broken copies of its migrated twin."""
import json
import os
import shutil

import pytest

pytest.importorskip("torch")

from verify_cli import verify_cli  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESUME = os.path.join(ROOT, "fixtures", "runnable", "resume_ckpt")
LEGACY = os.path.join(RESUME, "legacy")


def _verify(*args):
    return verify_cli(*args, cwd=ROOT)


def _broken(tmp_path, old, new):
    dst = tmp_path / "migrated"
    shutil.copytree(os.path.join(RESUME, "migrated"), dst)
    text = (dst / "train.py").read_text()
    assert old in text
    (dst / "train.py").write_text(text.replace(old, new))
    return str(dst)


def test_correct_migration_passes_every_mode_and_the_resume(tmp_path):
    out = tmp_path / "v.json"
    r = _verify("--entry", "train.py", "--steps", "4", "--resume-at", "2", "--mode", "", "--mode=--fp16",
                "--json", str(out), LEGACY, os.path.join(RESUME, "migrated"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "save after step 2 with '--save {ckpt} --save-at {k}', restart with '--resume {ckpt}'" in r.stdout
    assert "verify: mode '--fp16': PASS; forward float16 (autocast) -> float16 (autocast); resume at step 2: PASS" \
        in r.stdout
    data = json.loads(out.read_text())
    assert data["passed"] and [m["mode_args"] for m in data["modes"]] == ["", "--fp16"]
    fp16 = data["modes"][1]["resume"]
    assert fp16["passed"] and fp16["scaler_state"] == {"original": "checkpoint['amp']",
                                                       "migrated": "checkpoint['amp']"}
    restart = next(row for row in fp16["rows"] if row["step"] == 2)
    # the scale had dropped below 2**16 before the checkpoint, and both restarts kept it
    assert restart["original"]["scale"] == restart["migrated_resumed"]["scale"] == 16384.0


def test_scaler_saved_but_not_restored_fails_with_the_cause(tmp_path):
    broken = _broken(tmp_path, '        if args.fp16:\n            scaler.load_state_dict(checkpoint["amp"])\n', "")
    r = _verify("--entry", "train.py", "--steps", "4", "--resume", "--mode=--fp16", LEGACY, broken)
    assert r.returncode == 1, r.stdout + r.stderr
    assert ("step 2 ran at scale 65536 where the uninterrupted run had 16384 (the initial scale: the scaler state "
            "was not restored); the checkpoint holds the scaler state (checkpoint['amp']) but the resume never "
            "loads it") in r.stdout
    assert "verify: mode '--fp16': PASS" not in r.stdout and "resume at step 2: FAIL" in r.stdout


def test_scaler_not_saved_is_named(tmp_path):
    broken = _broken(tmp_path, '            if args.fp16:\n                state["amp"] = scaler.state_dict()\n', "")
    path = os.path.join(broken, "train.py")
    with open(path) as fh:
        text = fh.read()
    with open(path, "w") as fh:
        fh.write(text.replace("        if args.fp16:\n            scaler.load", '        if "amp" in checkpoint:\n'
                                                                          "            scaler.load"))
    r = _verify("--entry", "train.py", "--steps", "4", "--resume", "--mode=--fp16", LEGACY, broken)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "the checkpoint holds no scaler state: save scaler.state_dict() with it" in r.stdout


def test_resume_needs_flags_it_can_tell():
    two = os.path.join(ROOT, "fixtures", "runnable", "two_modules")
    r = _verify("--entry", "train.py", "--steps", "4", "--resume", os.path.join(two, "legacy"),
                os.path.join(two, "migrated"))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "cannot tell the resume flag (candidates: none): pass --resume-args" in r.stdout


def test_no_checkpoint_after_step_k_is_a_usage_error(tmp_path):
    r = _verify("--entry", "train.py", "--steps", "3", "--mode", "", "--save-args", "", "--resume-args",
                "--resume {ckpt}", LEGACY, os.path.join(RESUME, "migrated"))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "the original program wrote no checkpoint right after step 1" in r.stdout
