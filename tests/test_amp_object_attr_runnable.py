"""End to end: apex amp stored on an object (`model.amp = amp` in src/utils.py, `self.amp.scale_loss` with
`delay_unscale` accumulation in src/models.py) is rewritten with the real CLI across both modules; the
output matches its golden files, a second rewrite changes nothing, and its loss curves equal the hand
migration's in fp32 and in each apex mode the script offers (O0, O1, O2)."""
import ast
import filecmp
import os
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from migrate.verify import collect_losses  # noqa: E402

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.join(HERE, "fixtures", "runnable", "amp_on_object")
GOLDEN = os.path.join(HERE, "fixtures", "amp_object_attr", "argus_like", "after")
FILES = ("framework.py", "train.py", os.path.join("src", "__init__.py"), os.path.join("src", "utils.py"),
         os.path.join("src", "models.py"))


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "migrate", *args, "--no-cache"], capture_output=True, text=True)


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory):
    dst = tmp_path_factory.mktemp("amp_on_object")
    shutil.copytree(os.path.join(ROOT, "legacy"), dst, dirs_exist_ok=True)
    res = _cli("rewrite", str(dst))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "A2A181" in res.stdout and "A2A125" not in res.stdout and "A2A124" not in res.stdout, res.stdout
    return str(dst)


def test_output_is_the_golden_and_stable(rewritten):
    for rel in FILES:
        path = os.path.join(rewritten, rel)
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
        assert not any(isinstance(n, ast.ImportFrom) and (n.module or "").startswith("apex") for n in ast.walk(tree))
        assert filecmp.cmp(path, os.path.join(GOLDEN, rel), shallow=False), rel
    again = subprocess.run([sys.executable, "-m", "migrate", "rewrite", "--diff", "--no-cache", rewritten],
                           capture_output=True, text=True)
    assert again.stdout.count("+++") == 0, again.stdout


MODES = [[], ["--amp"], ["--amp", "--opt-level", "O2"], ["--amp", "--opt-level", "O0"]]


@pytest.mark.parametrize("args", MODES, ids=["fp32", "O1", "O2", "O0"])
def test_rewritten_matches_hand_migration(rewritten, args):
    tool = collect_losses(rewritten, "train.py", args + ["--steps", "6"], steps=6, device="cpu")
    hand = collect_losses(os.path.join(ROOT, "migrated"), "train.py", args + ["--steps", "6"], steps=6, device="cpu")
    assert sorted(tool) == sorted(hand)
    for rank in hand:
        t = [(r["losses"], r["skipped"], r["scale"]) for r in tool[rank]]
        h = [(r["losses"], r["skipped"], r["scale"]) for r in hand[rank]]
        assert len(h) == 6
        assert t == h, f"rank {rank}: tool {t} != hand {h}"
    if args[:1] == ["--amp"] and "O0" not in args:
        assert hand[0][0]["scale"] not in (None, 1.0), hand  # the mode really scales
