"""Launch commands outside shell scripts: YAML / INI config files (A2A414) and commands built in Python
for subprocess / os.system (A2A415) are reported with the torchrun line to use, never rewritten."""
import json
import os
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, "fixtures")


def _check(folder) -> tuple:
    proc = subprocess.run([sys.executable, "-m", "migrate", "check", "--format", "json", str(folder)],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    return proc.returncode, json.loads(proc.stdout)


def _messages(doc, code):
    out = []
    for f in doc["files"] if "files" in doc else []:
        out += [(os.path.basename(f["path"]), x["line"], x["message"]) for x in f.get("findings", []) if x["code"] == code]
    for x in doc.get("findings", []):
        if x["code"] == code:
            out.append((os.path.basename(x["path"]), x["line"], x["message"]))
    return sorted(out)


def test_config_files_get_findings_with_the_torchrun_line(tmp_path):
    shutil.copytree(os.path.join(FIXTURES, "launch_configs"), tmp_path / "repo")
    before = {p: (tmp_path / "repo" / p).read_bytes() for p in os.listdir(tmp_path / "repo")}
    rc, doc = _check(tmp_path / "repo")
    assert rc == 1
    got = _messages(doc, "A2A414")
    assert [(f, line) for f, line, _ in got] == [("cluster_job.yaml", 7), ("cluster_job.yaml", 9), ("tox.ini", 3)]
    assert "`torchrun --nproc_per_node=8 train.py --amp --epochs 90`" in got[0][2]
    assert ("`torchrun --nnodes 2 --node_rank $NODE_RANK --nproc_per_node 8 --master_addr $MASTER_ADDR "
            "train.py --amp`") in got[1][2]
    assert "`torchrun --nproc_per_node=2 tests/dist_smoke.py`" in got[2][2]
    # rewrite leaves config files byte-identical
    subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(tmp_path / "repo")], capture_output=True,
                   cwd=REPO, timeout=120)
    assert {p: (tmp_path / "repo" / p).read_bytes() for p in before} == before


def test_commands_built_in_python_are_reported_not_rewritten(tmp_path):
    src = os.path.join(FIXTURES, "launch", "subprocess_launcher.unchanged.py")
    shutil.copy(src, tmp_path / "launcher.py")
    rc, doc = _check(tmp_path)
    assert rc == 1
    got = _messages(doc, "A2A415")
    assert [line for _, line, _ in got] == [8, 14, 20]  # the docstring is prose, not a launch
    assert "`torchrun --nproc_per_node={gpus} --master_port={port} train.py --config {config}`" in got[0][2]
    assert '"-m", "torch.distributed.run"' in got[1][2] and "--use_env" in got[1][2]
    assert "`torchrun --nproc_per_node=%d train.py`" in got[2][2]
    proc = subprocess.run([sys.executable, "-m", "migrate", "explain", "A2A414"], capture_output=True, text=True,
                          cwd=REPO, timeout=60)
    assert proc.returncode == 0 and "torchrun" in proc.stdout
