"""Mode switches end to end: rewrite fixtures/runnable/amp_modes/legacy with the real CLI, run the output
and the hand-migrated twin on the CPU in every mode each script offers, and require identical curves;
the mixed modes (`--apex-amp` among them) must really run under autocast, not in fp32."""
import os
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from migrate.verify import collect_losses  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "runnable", "amp_modes")
STEPS = 4
MODES = [
    ("switch.py", []),
    ("switch.py", ["--apex-amp"]),
    ("switch.py", ["--native-amp"]),
    ("switch.py", ["--amp"]),
    ("fp16_flag.py", []),
    ("fp16_flag.py", ["--fp16", "O1"]),
]


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory):
    dst = tmp_path_factory.mktemp("amp_modes")
    shutil.copytree(os.path.join(ROOT, "legacy"), dst, dirs_exist_ok=True)
    res = subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(dst)], capture_output=True, text=True)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "A2A130" in res.stdout and "A2A131" not in res.stdout, res.stdout
    return str(dst)


def _curve(folder, entry, args):
    records = collect_losses(folder, entry, args + ["--steps", str(STEPS)], steps=STEPS, device="cpu")
    assert sorted(records) == [0]
    return [(r["losses"], r["skipped"], r["scale"]) for r in records[0]]


@pytest.fixture(scope="module")
def curves(rewritten):
    out = {}
    for entry, args in MODES:
        out[(entry, tuple(args))] = (_curve(rewritten, entry, args), _curve(os.path.join(ROOT, "migrated"), entry, args))
    return out


@pytest.mark.parametrize("entry,args", MODES, ids=[f"{e[:-3]}{''.join(a)}" for e, a in MODES])
def test_every_mode_matches_the_hand_migration(curves, entry, args):
    tool, hand = curves[(entry, tuple(args))]
    assert len(hand) == STEPS
    assert tool == hand


@pytest.mark.parametrize("entry,args", [m for m in MODES if m[1]], ids=lambda v: str(v))
def test_mixed_modes_run_under_autocast(curves, entry, args):
    tool, _ = curves[(entry, tuple(args))]
    fp32, _ = curves[(entry, ())]
    assert all(scale is not None for _, _, scale in tool), "no GradScaler: this mode trains without loss scaling"
    assert all(scale is None for _, _, scale in fp32)
    assert [losses for losses, _, _ in tool] != [losses for losses, _, _ in fp32], "same losses as fp32"


def test_legacy_modes_agree_with_the_migration(rewritten, curves):
    """The legacy script on the apex emulation: fp32 is the same run, each mixed mode stays close."""
    legacy = os.path.join(ROOT, "legacy")
    for entry, args in MODES:
        old = _curve(legacy, entry, args)
        tool, _ = curves[(entry, tuple(args))]
        for (lo, _, _), (lt, _, _) in zip(old, tool):
            assert lo == pytest.approx(lt, rel=1e-3), (entry, args)
