"""Shared check of runnable trainer fixtures: the rewrite, the hand twin and the legacy run (apex
emulation) give the same curve, and the rewrite and the twin give it again through save + resume."""
import pytest

from migrate.verify import collect_losses


def rows(records):
    """(losses, skipped, scale) per step of rank 0."""
    return [(r["losses"], r["skipped"], r["scale"]) for r in records[0]]


def assert_curves_agree(sides, mode, tmp_path, steps, save_at, rel=1e-3):
    """sides: {"legacy", "tool", "hand"} -> folder with train.py (--steps, --save-at, --checkpoint, --resume).
    Returns the uninterrupted curves by side."""
    runs = {}
    for name, folder in sides.items():
        full = rows(collect_losses(folder, "train.py", mode + ["--steps", str(steps)], steps=steps, device="cpu"))
        runs[name] = full
        if name == "legacy":
            continue  # the apex checkpoint format is the legacy side's own; its curve is compared below
        ckpt = str(tmp_path / f"{name}.pth")
        first = rows(collect_losses(folder, "train.py", mode + ["--steps", str(save_at), "--save-at", str(save_at),
                                                                "--checkpoint", ckpt], steps=100, device="cpu"))
        second = rows(collect_losses(folder, "train.py", mode + ["--steps", str(steps), "--resume", "--checkpoint",
                                                                 ckpt], steps=100, device="cpu"))
        assert len(full) == steps and first + second == full, f"{name}: save+resume != uninterrupted"
    assert runs["tool"] == runs["hand"]
    assert [s for _, s, _ in runs["legacy"]] == [s for _, s, _ in runs["hand"]]
    assert [lo for r in runs["legacy"] for lo in r[0]] == pytest.approx([lo for r in runs["hand"] for lo in r[0]],
                                                                     rel=rel)
    return runs
