"""The CLI's conventions, through real `apex2amp` subprocesses: what is fixed vs what needs a human,
paths, diagnostics, colour, --output, `python -m apex2amp`, where the cache goes."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from test_cli_helpers import REPO, cli, finding_lines

DEMO = os.path.join(REPO, "fixtures", "demo")


def _demo(tmp_path, name="demo"):
    dst = tmp_path / name
    shutil.copytree(DEMO, dst)
    return dst


# -- fixed vs needs-a-human (item 3) ------------------------------------------------------------


def test_text_marks_fixes_and_ends_with_fixed_and_need_review(tmp_path):
    repo = _demo(tmp_path)
    r = cli(["check", "--no-cache", "."], cwd=repo)
    assert r.returncode == 1, r.stderr
    found = finding_lines(r.stdout)
    fixes = [f for f in found if f["fix"]]
    review = [f for f in found if not f["fix"]]
    assert fixes and [f["code"] for f in review] == ["A2A107"], r.stdout
    assert r.stdout.splitlines()[-1].endswith(f"; {len(fixes)} fixable, {len(review)} need review")
    w = cli(["rewrite", "--no-cache", "."], cwd=repo)
    assert w.stdout.splitlines()[-1].endswith(f"; {len(fixes)} fixed, 1 need review"), w.stdout


def test_github_annotations_keep_warnings_for_follow_ups(tmp_path):
    repo = _demo(tmp_path)
    r = cli(["check", "--no-cache", "--format", "github", "."], cwd=repo)
    warnings = [ln for ln in r.stdout.splitlines() if ln.startswith("::warning")]
    notices = [ln for ln in r.stdout.splitlines() if ln.startswith("::notice")]
    assert len(warnings) == 1 and "title=A2A107" in warnings[0], r.stdout
    assert any("title=A2A101" in ln for ln in notices)


def test_check_after_rewrite_still_reports_the_apex_checkpoint_follow_up(tmp_path):
    repo = _demo(tmp_path)
    first = cli(["rewrite", "--no-cache", "."], cwd=repo)
    assert first.returncode == 1
    again = cli(["check", "--no-cache", "."], cwd=repo)
    assert again.returncode == 1, again.stdout
    found = finding_lines(again.stdout)
    assert [(f["path"], f["code"]) for f in found] == [("checkpoint.py", "A2A107")], again.stdout
    # marking it done ends it; the rewrite stays stable
    path = repo / "checkpoint.py"
    text = path.read_text()
    path.write_text(text.replace('scaler.load_state_dict(checkpoint["amp"])',
                                 'scaler.load_state_dict(checkpoint["amp"])  # apex2amp: ignore[A2A107]'))
    done = cli(["check", "--no-cache", "."], cwd=repo)
    assert done.returncode == 0, done.stdout


def test_native_code_with_its_own_scaler_key_is_not_reported():
    from migrate import rewrite_source
    src = ("import torch\nscaler = torch.amp.GradScaler('cuda')\nckpt = torch.load('c.pt')\n"
           "scaler.load_state_dict(ckpt['scaler'])\n")
    assert not [f for f in rewrite_source(src).findings if f.code == "A2A107"]
    converting = src.replace("ckpt['scaler']", "ckpt['amp']") + "# loss_scaler0 is converted by convert_amp()\n"
    assert not [f for f in rewrite_source(converting).findings if f.code == "A2A107"]


# -- paths (item 6) -----------------------------------------------------------------------------


def test_no_machine_paths_in_json_sarif_report_and_launch_notes(tmp_path):
    repo = _demo(tmp_path, "proj")
    shutil.copytree(os.path.join(REPO, "fixtures", "runnable_dist", "tutorial_spawn", "legacy"), repo / "spawn")
    here = tmp_path / "elsewhere"
    here.mkdir()
    report = here / "MIGRATION.md"
    r = cli(["check", "--no-cache", "--format", "json", "--report", str(report), "../proj"], cwd=here)
    sarif = cli(["check", "--no-cache", "--format", "sarif", "../proj"], cwd=here)
    text = cli(["check", "--no-cache", "../proj"], cwd=here)
    for out in (r.stdout, sarif.stdout, report.read_text(), text.stdout):
        assert str(tmp_path) not in out and "file://" not in out
    doc = json.loads(r.stdout)
    assert {f["path"] for f in doc["files"]} >= {"../proj/train.py", "../proj/launch.sh"}
    assert "launch: ../proj/spawn/train.py: torchrun --standalone --nproc_per_node=gpu ../proj/spawn/train.py" \
        in text.stdout, text.stdout
    notes = [n for f in doc["files"] for n in f["launch_notes"]]
    assert notes and all(n["path"] == "../proj/spawn/train.py" for n in notes if "command" in n)


def test_diff_of_files_above_the_working_folder_applies_with_git_and_patch(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("needs git")
    repo = _demo(tmp_path, "proj")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    here = tmp_path / "elsewhere"
    here.mkdir()
    d = cli(["rewrite", "--diff", "--no-cache", "../proj"], cwd=here)
    assert d.returncode == 1
    heads = [ln for ln in d.stdout.splitlines() if ln.startswith(("--- ", "+++ "))]
    assert heads and all(re.match(r"^(--- a|\+\+\+ b)/[^./][^ ]*$", h) for h in heads), heads
    (tmp_path / "p.diff").write_text(d.stdout)
    ok = subprocess.run(["git", "apply", "--check", str(tmp_path / "p.diff")], cwd=repo, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    if shutil.which("patch"):
        dry = subprocess.run(["patch", "-p1", "--dry-run", "-i", str(tmp_path / "p.diff")], cwd=repo,
                             capture_output=True, text=True, stdin=subprocess.DEVNULL)
        assert dry.returncode == 0, dry.stdout + dry.stderr


def test_a_missing_path_is_an_error_in_json_and_sarif(tmp_path):
    (tmp_path / "ok.py").write_text("x = 1\n")
    j = cli(["check", "--no-cache", "--format", "json", "ok.py", "missing.py"], cwd=tmp_path)
    doc = json.loads(j.stdout)
    assert j.returncode == 2 and doc["summary"]["exit_code"] == 2 and doc["summary"]["errors"] == 1
    assert [f["path"] for f in doc["files"] if f["error"]] == ["missing.py"]
    s = cli(["check", "--no-cache", "--format", "sarif", "missing.py"], cwd=tmp_path)
    inv = json.loads(s.stdout)["runs"][0]["invocations"][0]
    assert s.returncode == 2 and inv["exitCode"] == 2 and not inv["executionSuccessful"]
    assert inv["toolExecutionNotifications"][0]["level"] == "error"


def test_notebook_annotations_on_github_use_line_one(tmp_path):
    nb = tmp_path / "train.ipynb"
    shutil.copy(os.path.join(REPO, "fixtures", "notebooks", "train.before.ipynb"), nb)
    r = cli(["check", "--no-cache", "--format", "github", "train.ipynb"], cwd=tmp_path)
    cells = [ln for ln in r.stdout.splitlines() if "[cell " in ln]
    assert cells and all(",line=1," in ln and ",col=" not in ln for ln in cells), r.stdout
    t = cli(["check", "--no-cache", "train.ipynb"], cwd=tmp_path)
    assert re.search(r"^train\.ipynb:cell \d+:\d+:\d+: A2A\d{3} ", t.stdout, re.M), t.stdout


# -- diagnostics (item 7) -----------------------------------------------------------------------


def test_syntax_error_is_reported_at_cpythons_line(tmp_path):
    src = "import torch\nfrom apex import amp\n\ndef f(:\n    pass\n"
    (tmp_path / "bad.py").write_text(src)
    try:
        compile(src, "bad.py", "exec")
    except SyntaxError as e:
        line, col = e.lineno, e.offset
    r = cli(["check", "--no-cache", "bad.py"], cwd=tmp_path)
    assert r.returncode == 2
    assert f"bad.py:{line}:{col}: error: syntax error: " in r.stderr, r.stderr


def test_a_folder_without_python_files_warns(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "notes.txt").write_text("apex amp\n")
    r = cli(["check", "--no-cache", "docs"], cwd=tmp_path)
    assert r.returncode == 0
    assert "docs: warning: no Python files found" in r.stderr


# -- conventions (item 8) -----------------------------------------------------------------------


def _on_a_terminal(args, cwd, env):
    """Run the CLI with stdout and stderr on a pseudo-terminal; returns (exit code, bytes shown)."""
    import pty
    master, slave = pty.openpty()
    full = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    full["PYTHONPATH"] = REPO
    full.update(env)
    p = subprocess.Popen([sys.executable, "-m", "migrate", *args], cwd=cwd, env=full, stdin=subprocess.DEVNULL,
                         stdout=slave, stderr=slave)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    return p.wait(timeout=300), out


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
def test_no_color_and_force_color(tmp_path):
    repo = _demo(tmp_path)
    code, shown = _on_a_terminal(["check", "--no-cache", "."], repo, {"NO_COLOR": "1"})
    assert code == 1 and b"A2A101" in shown and b"\x1b[" not in shown
    forced = cli(["check", "--no-cache", "."], cwd=repo, env={"FORCE_COLOR": "1"})
    assert "\x1b[" in forced.stdout


def test_output_file_for_the_text_format(tmp_path):
    repo = _demo(tmp_path)
    r = cli(["check", "--no-cache", "-o", "out.txt", "."], cwd=repo)
    assert r.returncode == 1 and "A2A101" not in r.stdout
    written = (repo / "out.txt").read_text()
    assert finding_lines(written) and "need review" in written.splitlines()[-1]


def test_python_dash_m_apex2amp(tmp_path):
    env = dict(os.environ, PYTHONPATH=REPO)
    r = subprocess.run([sys.executable, "-m", "apex2amp", "--version"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and "apex2amp, version" in r.stdout, r.stderr


def test_hooks_take_shell_launch_scripts_and_a_named_shebang_script_is_shell(tmp_path):
    import yaml  # pre-commit's own dependency
    with open(os.path.join(REPO, ".pre-commit-hooks.yaml"), encoding="utf-8") as fh:
        hooks = yaml.safe_load(fh)
    assert all("shell" in h["types_or"] for h in hooks)
    script = tmp_path / "run_train"
    script.write_text("#!/usr/bin/env bash\npython -m torch.distributed.launch --nproc_per_node=2 train.py\n")
    r = cli(["rewrite", "--no-cache", "run_train"], cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "torchrun --nproc_per_node=2 train.py" in script.read_text()


# -- dependencies and the cache (item 9) --------------------------------------------------------


def test_dependencies_are_declared():
    import tomllib
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as fh:
        deps = tomllib.load(fh)["project"]["dependencies"]
    names = {re.split(r"[<>=;\s]", d, maxsplit=1)[0]: d for d in deps}
    assert "pathspec" in names and names["tomli"].replace(" ", "").endswith('python_version<"3.11"')


def test_a_poetry_style_pyproject_reads_without_tomllib(tmp_path):
    """Python < 3.11 (tomllib hidden): tomli reads arrays of tables, through the real CLI."""
    pytest.importorskip("tomli")
    (tmp_path / ".git").mkdir()
    (tmp_path / "pyproject.toml").write_text(
        '[tool.poetry]\nname = "p"\n\n[[tool.poetry.source]]\nname = "torch"\nurl = "https://x.invalid/"\n\n'
        '[tool.apex2amp]\nignore = ["A2A1"]\n')
    shutil.copy(os.path.join(DEMO, "checkpoint.py"), tmp_path / "checkpoint.py")
    code = ("import sys; sys.modules['tomllib'] = None; sys.argv = ['apex2amp', 'check', '--no-cache', '.']; "
            "from migrate.cli import main; main()")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=dict(os.environ, PYTHONPATH=REPO),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode in (0, 1) and "invalid TOML" not in r.stderr, r.stdout + r.stderr
    assert "A2A106" not in r.stdout  # the table was read: A2A1xx ignored


def test_cache_goes_beside_the_projects_pyproject(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "p"\n')
    sub = tmp_path / "src"
    shutil.copytree(DEMO, sub)
    r = cli(["check", "."], cwd=sub, env={"APEX2AMP_NO_CACHE": "", "APEX2AMP_CACHE_DIR": ""})
    assert r.returncode == 1
    assert (tmp_path / ".apex2amp_cache").is_dir() and not (sub / ".apex2amp_cache").exists()
