"""A clip on every micro-batch, moved to the accumulation boundary by the unsafe fix (A2A145), end to end:
the CLI's rewrite with --unsafe-fixes equals the hand migration step by step in fp32 and mixed precision,
and `verify` compares the legacy program with it under the fidelity tolerance."""
import json
import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from verify_cli import verify_cli  # noqa: E402

from migrate.verify import collect_losses  # noqa: E402

CASE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "runnable", "accum_clip")
MODES = [[], ["--fp16"]]
ENTRIES = ["train.py", "train_vit.py"]  # one clip after the fp16 switch / a clip in each of its branches


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "migrate", *args], capture_output=True, text=True, cwd=cwd)


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory):
    dst = str(tmp_path_factory.mktemp("accum_clip") / "legacy")
    shutil.copytree(os.path.join(CASE, "legacy"), dst)
    offered = _cli("check", dst)  # the exact fix (A2A148) by default, the move offered
    assert "A2A148" in offered.stdout and "--unsafe-fixes` would instead move it" in offered.stdout, offered.stdout
    r = _cli("rewrite", "--unsafe-fixes", dst)
    assert r.returncode == 1 and "rewrote" in r.stdout, r.stdout + r.stderr
    for entry in ENTRIES:
        with open(os.path.join(dst, entry), encoding="utf-8") as fh:
            assert "import apex" not in fh.read().replace("from apex", "import apex")
    return dst


@pytest.mark.parametrize("mode", MODES, ids=["fp32", "fp16"])
@pytest.mark.parametrize("max_norm", ["0.3", "0.66"])  # the clip engaged on most steps / on a few
@pytest.mark.parametrize("entry", ENTRIES)
def test_unsafe_fix_equals_hand_migration(rewritten, entry, mode, max_norm):
    args = mode + ["--max-grad-norm", max_norm]
    tool = collect_losses(rewritten, entry, args, steps=10, device="cpu")
    hand = collect_losses(os.path.join(CASE, "migrated"), entry, args, steps=10, device="cpu")
    t = [(r["losses"], r["skipped"], r["scale"]) for r in tool[0]]
    h = [(r["losses"], r["skipped"], r["scale"]) for r in hand[0]]
    assert len(h) == 10 and t == h


def test_verify_uses_the_fidelity_tolerance(rewritten, tmp_path):
    out = tmp_path / "verdict.json"
    r = verify_cli(os.path.join(CASE, "legacy"), rewritten, "--entry", "train.py", "--steps", "10",
                   "--device", "cpu", "--json", str(out), "--", "--max-grad-norm", "0.66")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "unsafe fix" in r.stdout and "fidelity" in r.stdout
    verdict = json.loads(out.read_text())
    for m in verdict["modes"]:
        assert m["unsafe_fixes"] == ["train.py:55 A2A145", "train_vit.py:53 A2A145"]
        assert m["passed"]
        # the curves do differ (the clip engaged on a few steps): same-engine would fail
        assert any(row["rel_diff"] > 1e-6 for row in m["rows"])
