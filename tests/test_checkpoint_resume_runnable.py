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


def _namespace_layout(src_folder, dest):
    """`src_folder` with utils.py moved into `src/` (a folder without __init__.py: a namespace
    package, as swav's `src.utils`) and train.py importing `from src.utils import ...`."""
    os.makedirs(os.path.join(dest, "src"))
    shutil.copy(os.path.join(src_folder, "utils.py"), os.path.join(dest, "src", "utils.py"))
    with open(os.path.join(src_folder, "train.py"), encoding="utf-8") as fh:
        text = fh.read()
    assert text.count("from utils import restart_from_checkpoint") == 1
    with open(os.path.join(dest, "train.py"), "w", encoding="utf-8") as fh:
        fh.write(text.replace("from utils import restart_from_checkpoint", "from src.utils import restart_from_checkpoint"))


def test_helper_in_a_namespace_package_migrates_like_the_flat_one(sides, tmp_path):
    """The helper in `src/utils.py` with no `src/__init__.py`: its facts (module `utils`) are the
    module `src.utils` that train.py imports, so the pair migrates exactly as in the flat layout
    (A2A135, not "restart_from_checkpoint is not in the files read"), and the rewrite runs like the
    hand migration moved the same way, save + resume included."""
    tool, hand = tmp_path / "tool", tmp_path / "hand"
    _namespace_layout(os.path.join(CASE, "legacy"), str(tool))
    _namespace_layout(os.path.join(CASE, "migrated"), str(hand))
    res = subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(tool)], capture_output=True, text=True)
    assert res.returncode == 1 and "A2A135" in res.stdout and "A2A136" not in res.stdout, res.stdout
    with open(os.path.join(sides["tool"], "train.py"), encoding="utf-8") as fh:
        flat = fh.read()
    assert (tool / "train.py").read_text() == flat.replace("from utils import", "from src.utils import")
    assert (tool / "src" / "utils.py").read_text() == (hand / "src" / "utils.py").read_text()
    for mode in sorted(MODES):
        runs = {}
        for name, folder in (("tool", tool), ("hand", hand)):
            full = _rows(collect_losses(str(folder), "train.py", MODES[mode] + ["--steps", str(STEPS)], steps=STEPS,
                                        device="cpu"))
            first, second = _save_and_resume(str(folder), mode, str(tmp_path / f"{name}-{mode}.pth"))
            assert first + second == full, f"{name} {mode}: save+resume != uninterrupted"
            runs[name] = full
        assert runs["tool"] == runs["hand"], mode
