"""Save and resume across modules, run for real on the CPU: the legacy apex script (on the apex
emulation), the CLI's rewrite of it and the hand-migrated twin (fixtures/runnable/ckpt_resume) train
K steps and save a checkpoint, then a second process `--resume`s from it through the generic
`restart_from_checkpoint(**kwargs)` helper of utils.py. Step by step, the losses, skipped steps and the
loss scale of save + resume equal the uninterrupted run's, in fp32 and fp16, on every side."""
import os
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from migrate.verify import collect_losses  # noqa: E402

CASE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "runnable",
                    "ckpt_resume")
STEPS, SAVE_AT = 8, 3
MODES = {"fp16": ["--use-fp16"], "fp32": []}


@pytest.fixture(scope="module")
def sides(tmp_path_factory):
    tool = tmp_path_factory.mktemp("ckpt_resume_tool")
    shutil.copytree(os.path.join(CASE, "legacy"), tool, dirs_exist_ok=True)
    res = subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(tool)], capture_output=True, text=True)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "A2A135" in res.stdout, res.stdout
    return {"legacy": os.path.join(CASE, "legacy"), "tool": str(tool), "hand": os.path.join(CASE, "migrated")}


def _rows(records):
    return [(r["losses"], r["skipped"], r["scale"]) for r in records[0]]


def _save_and_resume(folder, mode, ckpt):
    first = collect_losses(folder, "train.py", MODES[mode] + ["--steps", str(SAVE_AT), "--save-at", str(SAVE_AT),
                                                              "--checkpoint", ckpt], steps=100, device="cpu")
    assert os.path.isfile(ckpt)
    second = collect_losses(folder, "train.py", MODES[mode] + ["--steps", str(STEPS), "--resume",
                                                               "--checkpoint", ckpt], steps=100, device="cpu")
    return _rows(first), _rows(second)


def test_rewrite_of_the_pair_leaves_no_apex(sides):
    with open(os.path.join(sides["tool"], "train.py"), encoding="utf-8") as fh:
        text = fh.read()
    assert "apex" not in text and "amp=scaler," in text and 'save_dict["amp"] = scaler.state_dict()' in text
    with open(os.path.join(sides["tool"], "utils.py"), encoding="utf-8") as fh, \
            open(os.path.join(CASE, "legacy", "utils.py"), encoding="utf-8") as orig:
        assert fh.read() == orig.read()


@pytest.mark.parametrize("mode", sorted(MODES))
def test_resumed_run_continues_the_uninterrupted_one(sides, mode, tmp_path):
    runs = {}
    for name, folder in sides.items():
        full = _rows(collect_losses(folder, "train.py", MODES[mode] + ["--steps", str(STEPS)], steps=STEPS,
                                    device="cpu"))
        first, second = _save_and_resume(folder, mode, str(tmp_path / f"{name}.pth"))
        assert len(full) == STEPS and len(first) == SAVE_AT and len(second) == STEPS - SAVE_AT
        assert first + second == full, f"{name}: save+resume {first + second} != uninterrupted {full}"
        runs[name] = full
    assert runs["tool"] == runs["hand"]
    assert [(s, sc) for _, s, sc in runs["tool"]] == [(s, sc) for _, s, sc in runs["legacy"]]
    if mode == "fp16":
        # the first step overflows at 2**16, so the scale the resume must restore is not the initial one
        assert runs["hand"][0][1] and runs["hand"][SAVE_AT][2] == 32768.0


def test_resume_without_the_scaler_state_would_show(sides, tmp_path):
    """Control: the comparison above sees a resume that drops the loss scale."""
    ckpt = str(tmp_path / "hand.pth")
    collect_losses(sides["hand"], "train.py", ["--use-fp16", "--steps", str(SAVE_AT), "--save-at", str(SAVE_AT),
                                               "--checkpoint", ckpt], steps=100, device="cpu")
    state = torch.load(ckpt, map_location="cpu")
    del state["amp"]
    torch.save(state, ckpt)
    second = _rows(collect_losses(sides["hand"], "train.py", ["--use-fp16", "--steps", str(STEPS), "--resume",
                                                              "--checkpoint", ckpt], steps=100, device="cpu"))
    assert second[0][2] == 65536.0
