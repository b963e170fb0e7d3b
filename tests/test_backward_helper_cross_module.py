"""A backward helper in utils.py (`def backward(loss, optimizer, args)` holding `amp.scale_loss`) and the
loop that clips and steps in train.py migrate together (A2A147), or not at all; real CLI runs, and the
runnable pair (fp16 flag read from a JSON config) equal to the hand migration in fp32 and fp16."""
import os
import shutil
import subprocess
import sys

import pytest
from verify_cli import verify_cli

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures")
PAIR = os.path.join(ROOT, "backward_helper", "args_namespace")
RUNNABLE = os.path.join(ROOT, "runnable", "backward_helper")


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "migrate", *args], capture_output=True, text=True)


def _read(path):
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def _copy(src, tmp_path, name="repo"):
    dst = tmp_path / name
    shutil.copytree(src, dst)
    (dst / ".git").mkdir(exist_ok=True)
    return str(dst)


def test_helper_and_caller_migrate_together(tmp_path):
    repo = _copy(os.path.join(PAIR, "before"), tmp_path)
    r = _cli("rewrite", repo)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "A2A147" in r.stdout
    for name in ("train.py", "utils.py"):
        assert _read(os.path.join(repo, name)) == _read(os.path.join(PAIR, "after", name)), name
    again = _cli("rewrite", "--diff", repo)
    assert "+++" not in again.stdout


def test_helper_alone_in_the_run_keeps_its_amp_code(tmp_path):
    repo = _copy(os.path.join(PAIR, "before"), tmp_path)
    r = _cli("check", os.path.join(repo, "utils.py"))
    assert "A2A117" in r.stdout and "held back" in r.stdout
    assert "would rewrite" not in r.stdout


def test_caller_that_keeps_its_amp_code_holds_the_helper_back(tmp_path):
    repo = _copy(os.path.join(PAIR, "before"), tmp_path)
    train = os.path.join(repo, "train.py")
    text = _read(train)
    # the step only every second micro-batch, the clip on every one: with its exact fix (A2A148) deselected,
    # refused without --unsafe-fixes
    text = text.replace("        optimizer.step()\n", "        if step % 2 == 1:\n            optimizer.step()\n")
    with open(train, "w", encoding="utf-8") as fh:
        fh.write(text)
    before = {n: _read(os.path.join(repo, n)) for n in ("train.py", "utils.py")}
    r = _cli("rewrite", "--ignore", "A2A148", repo)
    # the helper's module names the caller that keeps apex (the engine's first cross-module pass says it)
    assert "A2A117" in r.stdout and ("held back" in r.stdout or "calls this module's functions and keeps its apex" in r.stdout)
    assert {n: _read(os.path.join(repo, n)) for n in before} == before
    # with the unsafe fix the caller migrates, and the helper with it
    r = _cli("rewrite", "--unsafe-fixes", "--ignore", "A2A148", repo)
    assert "A2A147" in r.stdout and "held back" not in r.stdout and "keeps its apex amp code" not in r.stdout
    assert "scaler.scale(loss).backward()" in _read(os.path.join(repo, "utils.py"))
    assert "scaler.unscale_(optimizer)" in _read(train)


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory):
    repo = _copy(os.path.join(RUNNABLE, "legacy"), tmp_path_factory.mktemp("backward_helper"))
    r = _cli("rewrite", repo)
    assert r.returncode == 1 and r.stdout.count("rewrote ") == 2, r.stdout + r.stderr
    return repo


@pytest.mark.parametrize("config", ["configs/fp32.json", "configs/fp16.json"])
def test_runnable_pair_equals_hand_migration(rewritten, config):
    pytest.importorskip("torch")
    from migrate.verify import collect_losses
    hand_dir = os.path.join(RUNNABLE, "migrated")
    tool = collect_losses(rewritten, "train.py", ["--config", os.path.join(rewritten, config)], steps=8, device="cpu")
    hand = collect_losses(hand_dir, "train.py", ["--config", os.path.join(hand_dir, config)], steps=8, device="cpu")
    t = [(r["losses"], r["skipped"], r["scale"]) for r in tool[0]]
    h = [(r["losses"], r["skipped"], r["scale"]) for r in hand[0]]
    assert len(h) == 8 and t == h


def test_verify_passes_in_both_precisions(rewritten):
    cfg = os.path.join(RUNNABLE, "legacy", "configs")
    r = verify_cli(os.path.join(RUNNABLE, "legacy"), rewritten, "--entry", "train.py", "--steps", "6",
                   "--device", "cpu", "--mode", "--config " + os.path.join(cfg, "fp32.json"),
                   "--mode", "--config " + os.path.join(cfg, "fp16.json"), "--", "--steps", "6")
    assert r.returncode == 0, r.stdout + r.stderr
