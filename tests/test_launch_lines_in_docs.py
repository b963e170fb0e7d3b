"""Launch lines shown in a .py module's docstrings and comments get A2A411 with the torchrun line, and a
module that is a copy of torch's launcher gets a finding that torchrun replaces it; nothing is rewritten."""
import json
import os
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, "fixtures")


def _findings(folder, code):
    proc = subprocess.run([sys.executable, "-m", "migrate", "check", "--format", "json", str(folder)],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    doc = json.loads(proc.stdout)
    out = []
    for f in doc.get("files", []):
        out += [(x["line"], x["message"]) for x in f.get("findings", []) if x["code"] == code]
    out += [(x["line"], x["message"]) for x in doc.get("findings", []) if x["code"] == code]
    return sorted(out)


def test_vendored_launcher_lines_and_copy_are_reported(tmp_path):
    shutil.copy(os.path.join(FIXTURES, "launch_docs", "vendored_launcher.unchanged.py"), tmp_path / "launch.py")
    before = (tmp_path / "launch.py").read_bytes()
    got = _findings(tmp_path, "A2A411")
    assert [line for line, _ in got] == [2, 7, 12, 15, 45]
    assert "copy of torch's launcher" in got[0][1] and "torchrun" in got[0][1]
    assert "`torchrun --nproc_per_node=4`" in got[1][1]
    assert "`torchrun --nproc_per_node=8 --nnodes=2 --node_rank=0`" in got[2][1]
    assert "`torchrun --help`" in got[3][1]
    assert "`torchrun --nproc_per_node=8 scripts/launch.py`" in got[4][1]
    subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(tmp_path)], capture_output=True, cwd=REPO,
                   timeout=120)
    assert (tmp_path / "launch.py").read_bytes() == before


def test_prose_and_a_job_launcher_are_not_a_launcher_copy(tmp_path):
    shutil.copy(os.path.join(FIXTURES, "launch", "subprocess_launcher.unchanged.py"), tmp_path / "launcher.py")
    assert _findings(tmp_path, "A2A411") == []
