"""A repository's own copy of torch.distributed.launch (fixtures/launch_torchrun/launcher_copy/tools/launch.py):
when it does only what torchrun does, the shell lines that run it become torchrun lines with the copy's
appended arguments at the end (A2A421); lines torchrun cannot take as written, docs and copies that do more
are reported. Real CLI runs on copies of the fixture; the runnable tests run the legacy scripts (the copy
starting the workers) and the hand-migrated `*.expected.sh` (real torchrun) with gloo and compare the
per-rank losses step by step, on one node (2 processes) and on two "nodes" of one process each."""
import json
import os
import re
import shutil
import socket
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "launch_torchrun",
                    "launcher_copy")


def _copy(tmp_path, keep_expected=False):
    dst = tmp_path / "repo"
    shutil.copytree(ROOT, dst, ignore=None if keep_expected else shutil.ignore_patterns("*.expected.*"))
    (dst / ".git").mkdir()
    return dst


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "migrate", *args], capture_output=True, text=True)


def _expected(name):
    with open(os.path.join(ROOT, name), encoding="utf-8") as fh:
        return fh.read()


def test_callers_of_the_copy_become_torchrun(tmp_path):
    repo = _copy(tmp_path)
    keep = {n: (repo / n).read_text() for n in ("README.md", "run_logged.sh", "tools/launch.py", "train.py")}
    res = _cli("rewrite", str(repo))
    assert res.returncode == 1, res.stdout + res.stderr
    for name in ("run_single", "run_multi"):
        assert (repo / f"{name}.sh").read_text() == _expected(f"{name}.expected.sh"), res.stdout
    for name, text in keep.items():
        assert (repo / name).read_text() == text, name
    out = res.stdout
    assert re.search(r"run_single\.sh:6:1: A2A421 \[\*\]", out) and re.search(r"run_multi\.sh:3:1: A2A421 \[\*\]", out)
    assert "README.md:5:5: A2A421" in out and "torchrun --nproc_per_node 4 train.py --steps 100 --dist" in out
    assert "run_logged.sh:2:1: A2A421" in out and "pipe" in out  # `| tee`: where --dist goes is not the line's end
    assert "run_logged.sh:3:1: A2A421" in out and "`--nproc` is not an option" in out
    assert "launch.py:2:1: A2A411" in out and "line for line" in out and "delete this file" in out
    again = _cli("rewrite", str(repo))
    for name in ("run_single", "run_multi"):
        assert (repo / f"{name}.sh").read_text() == _expected(f"{name}.expected.sh"), again.stdout
    assert "A2A421 [*]" not in again.stdout


@pytest.mark.parametrize("edit,why", [
    (('["--dist"]', '["--dist", "--local_rank={}".format(local_rank)]'), "passes --local_rank"),
    (('["--dist"]', '["--dist", os.environ["EXTRA"]]'), "literal strings"),
    (('env["LOCAL_RANK"] = str(local_rank)', 'env["LOCAL_RANK"] = str(local_rank)\n        env["OMP_NUM_THREADS"] = "4"'),
     "OMP_NUM_THREADS"),
    (('default=29500', 'default=12345'), "defaults to something other"),
    (('    children = []', '    os.makedirs("logs", exist_ok=True)\n    children = []'), "os.makedirs"),
    (('args.nproc_per_node * args.node_rank + local_rank', 'args.node_rank + local_rank'), "RANK"),
    (('"--dist"]', '"--dist"] + ["--use_env"]'), "its command"),
])
def test_a_copy_that_does_more_than_torchrun_keeps_its_callers(tmp_path, edit, why):
    repo = _copy(tmp_path)
    launch = repo / "tools" / "launch.py"
    text = launch.read_text()
    assert edit[0] in text
    launch.write_text(text.replace(edit[0], edit[1], 1))
    before = (repo / "run_single.sh").read_text()
    res = _cli("rewrite", str(repo))
    assert (repo / "run_single.sh").read_text() == before
    assert "A2A421" not in res.stdout
    line = next(ln for ln in res.stdout.splitlines() if "launch.py:2:1: A2A411" in ln)
    assert "not line for line" in line and why in line, line


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env():
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONHASHSEED="0")
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    bindir = os.path.dirname(sys.executable)  # `python` and `torchrun` of this interpreter
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    return env


def _losses(outputs):
    got, ranks = {}, {}
    for out in outputs:
        for chunk in re.findall(r"\{[^{}]*\}", out):
            rec = json.loads(chunk)
            if "loss" in rec:
                got[(rec["rank"], rec["step"])] = rec["loss"]
            else:
                ranks[rec["rank"]] = (rec["local_rank"], rec["world"])
    return got, ranks


def _run(repo, commands):
    procs = [subprocess.Popen(["bash", *c], cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=_env()) for c in commands]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, out + err
        outs.append(out)
    return _losses(outs)


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["single", "multi"])
def test_legacy_copy_and_torchrun_train_the_same(tmp_path, shape):
    repo = _copy(tmp_path, keep_expected=True)
    runs = {}
    for side in ("legacy", "torchrun"):
        name = {"legacy": f"run_{shape}.sh", "torchrun": f"run_{shape}.expected.sh"}[side]
        port = str(_free_port())
        if shape == "single":
            cmds = [[name, "2", port, "train.py", "--steps", "4"]]
        else:  # two nodes of one process each, node 0 and node 1, on this machine
            cmds = [[name, "2", str(k), "127.0.0.1", "1", port, "train.py", "4"] for k in (0, 1)]
        runs[side] = _run(repo, cmds)
    (legacy, legacy_ranks), (migrated, migrated_ranks) = runs["legacy"], runs["torchrun"]
    assert set(legacy) == {(r, s) for r in (0, 1) for s in range(4)}
    assert legacy == migrated
    want = {0: (0, 2), 1: (1, 2)} if shape == "single" else {0: (0, 2), 1: (0, 2)}
    assert legacy_ranks == migrated_ranks == want
