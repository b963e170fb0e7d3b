"""`python SCRIPT.py` lines in launch files of the run, for a script whose mp.spawn the same run moved
to torchrun, become the torchrun line (A2A420); documentation gets a finding. Real CLI runs on copies
of fixtures/launch_torchrun/<case>/ (`<name>.expected<ext>`: the launch file after the rewrite)."""
import os
import shutil
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "launch_torchrun")


def _copy(case, tmp_path):
    dst = tmp_path / case
    shutil.copytree(os.path.join(ROOT, case), dst, ignore=shutil.ignore_patterns("*.expected.*"))
    return dst


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "migrate", *args], capture_output=True, text=True, cwd=cwd)


def _expected(case, name):
    with open(os.path.join(ROOT, case, name), encoding="utf-8") as fh:
        return fh.read()


def test_plain_python_lines_become_torchrun(tmp_path):
    repo = _copy("spawn_script", tmp_path)
    readme = (repo / "README.md").read_text()
    res = _cli("rewrite", str(repo))
    assert res.returncode == 1, res.stdout + res.stderr
    assert (repo / "run.sh").read_text() == _expected("spawn_script", "run.expected.sh")
    assert (repo / "README.md").read_text() == readme
    assert "README.md:5:5: A2A420" in res.stdout and "torchrun --standalone --nproc_per_node=gpu train.py" in res.stdout
    assert 'int(os.environ["LOCAL_RANK"])' in (repo / "train.py").read_text()
    again = _cli("rewrite", str(repo))
    assert (repo / "run.sh").read_text() == _expected("spawn_script", "run.expected.sh"), again.stdout


def test_check_reports_each_line_and_writes_nothing(tmp_path):
    repo = _copy("spawn_script", tmp_path)
    before = (repo / "run.sh").read_text()
    res = _cli("check", str(repo))
    assert res.returncode == 1
    assert (repo / "run.sh").read_text() == before
    for line in (3, 4, 6):
        assert f"run.sh:{line}:" in res.stdout and "A2A420" in res.stdout, res.stdout
    assert "plot.py" not in "".join(ln for ln in res.stdout.splitlines() if "A2A420" in ln)


def test_line_without_the_spawn_flag_keeps_plain_python(tmp_path):
    repo = _copy("spawn_under_flag", tmp_path)
    res = _cli("rewrite", str(repo))
    assert res.returncode == 1, res.stdout + res.stderr
    assert (repo / "train.sh").read_text() == _expected("spawn_under_flag", "train.expected.sh")


def test_script_outside_the_run_is_left_alone(tmp_path):
    repo = _copy("spawn_script", tmp_path)
    before = (repo / "run.sh").read_text()
    res = _cli("rewrite", "run.sh", cwd=str(repo))
    assert res.returncode == 0, res.stdout + res.stderr
    assert (repo / "run.sh").read_text() == before


def test_ignored_code_keeps_the_line(tmp_path):
    repo = _copy("spawn_script", tmp_path)
    before = (repo / "run.sh").read_text()
    _cli("rewrite", "--ignore", "A2A420", str(repo))
    assert (repo / "run.sh").read_text() == before
    assert "LOCAL_RANK" in (repo / "train.py").read_text()


def test_explain():
    res = _cli("explain", "A2A420")
    assert res.returncode == 0 and "LOCAL_RANK" in res.stdout
