"""Shell/Makefile launch files and README reports (fixtures/launch_scripts).

Conventions: `<name>.before<ext>` -> `<name>.after<ext>` (rewritten), `<name>.unchanged<ext>` (left alone),
`<name>.report.md` + `<name>.report.lines` (documentation: findings `LINE CODE`, text never changed).
A fixture's real file name is `<name><ext>` (`Makefile.before` -> `Makefile`).
"""
import os
import shutil
import subprocess
import sys

import pytest

from migrate.launch_scripts import report_doc_text, rewrite_launch_text

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "launch_scripts")


def _read(p):
    with open(p, encoding="utf-8", newline="") as fh:
        return fh.read()


def _pairs():
    out = []
    for f in sorted(os.listdir(ROOT)):
        if ".before" in f:
            name, ext = f.split(".before", 1)
            out.append((name + ext, os.path.join(ROOT, f), os.path.join(ROOT, f"{name}.after{ext}")))
        elif ".unchanged" in f:
            name, ext = f.split(".unchanged", 1)
            out.append((name + ext, os.path.join(ROOT, f), os.path.join(ROOT, f)))
    return out


PAIRS = _pairs()


@pytest.mark.parametrize("real,before,after", PAIRS, ids=[p[0] for p in PAIRS])
def test_launch_script_golden(real, before, after):
    new, findings = rewrite_launch_text(_read(before))
    assert new == _read(after)
    again, _ = rewrite_launch_text(new)
    assert again == new
    if before != after:
        assert any(f.code == "A2A410" and f.fixed for f in findings)


def test_readme_reported_not_rewritten():
    text = _read(os.path.join(ROOT, "README.report.md"))
    want = [ln.split() for ln in _read(os.path.join(ROOT, "README.report.lines")).splitlines() if ln.strip()]
    got = [[str(f.line), f.code] for f in report_doc_text(text)]
    assert got == want


def test_multiproc_in_makefile_is_reported():
    _, findings = rewrite_launch_text(_read(os.path.join(ROOT, "Makefile.before")))
    assert any(f.code == "A2A223" and not f.fixed and f.line == 5 for f in findings)


def test_crlf_and_suppression_survive():
    text = "python -m torch.distributed.launch --use_env a.py\r\n" \
           "python -m torch.distributed.launch b.py  # apex2amp: ignore\r\n"
    new, _ = rewrite_launch_text(text)
    assert new == "torchrun a.py\r\npython -m torch.distributed.launch b.py  # apex2amp: ignore\r\n"


def test_cli_rewrites_shell_and_reports_readme(tmp_path):
    for real, before, _ in PAIRS:
        shutil.copy(before, tmp_path / real)
    shutil.copy(os.path.join(ROOT, "README.report.md"), tmp_path / "README.md")
    readme = _read(tmp_path / "README.md")
    proc = subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(tmp_path)], capture_output=True,
                          text=True, cwd=os.path.dirname(ROOT))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    for real, _, after in PAIRS:
        assert _read(tmp_path / real) == _read(after), real
    assert _read(tmp_path / "README.md") == readme
    assert "A2A411" in proc.stdout and "README.md:6:" in proc.stdout


def test_commented_launch_gets_same_rewrite_as_live():
    live = "python -m torch.distributed.launch --no_python --use_env --nproc_per_node 8 bash -c 'run.sh'\n"
    text = live + "  #" + live + "# " + live.replace("--use_env", "--use-env=1")
    new, findings = rewrite_launch_text(text)
    want = "torchrun --no_python --nproc_per_node 8 bash -c 'run.sh'\n"
    assert new == want + "  #" + want + "# " + want
    assert [f.line for f in findings if "--use_env dropped" in f.message] == [1, 2, 3]
    assert rewrite_launch_text(new)[0] == new


def test_commented_launch_continuation_and_assignment_drop_use_env():
    text = ("python -m torch.distributed.launch a.py\n"
            "#python -m torch.distributed.launch \\\n"
            "#    --use_env \\\n"
            "#    b.py\n"
            "#ARGS=\"--nproc_per_node 8 --use_env\"\n"
            "# export ARGS=\"--use-env\"\n")
    new, _ = rewrite_launch_text(text)
    assert new == ("torchrun a.py\n"
                   "#torchrun \\\n"
                   "#    \\\n"
                   "#    b.py\n"
                   "#ARGS=\"--nproc_per_node 8\"\n"
                   "# export ARGS=\"\"\n")


def test_use_env_in_quoted_assignment_keeps_quotes():
    text = ("python -m torch.distributed.launch a.py\n"
            "ARGS=\"--nproc_per_node 8 --use_env=True\"\n"
            "B=\"--use_env --nnodes 2\"\n"
            "#C='--use-env'\n"
            "p.add_argument(\"--use_env\", action='store_true')\n")
    new, _ = rewrite_launch_text(text)
    assert new == ("torchrun a.py\n"
                   "ARGS=\"--nproc_per_node 8\"\n"
                   "B=\"--nnodes 2\"\n"
                   "#C=''\n"
                   "p.add_argument(\"--use_env\", action='store_true')\n")


def test_prose_comment_keeps_use_env():
    text = ("# the old launcher needed --use_env to set LOCAL_RANK\n"
            "#python -m torch.distributed.launch a.py\n"
            "# see --use_env above\n"
            "python -m torch.distributed.launch --use_env a.py\n")
    new, _ = rewrite_launch_text(text)
    assert new == ("# the old launcher needed --use_env to set LOCAL_RANK\n"
                   "#torchrun a.py\n"
                   "# see --use_env above\n"
                   "torchrun a.py\n")


def test_makefile_and_dockerfile_comments_drop_use_env():
    launch = "$(PYTHON) -m torch.distributed.launch --use_env t.py\n"
    new, _ = rewrite_launch_text("train:\n\t# " + launch + "\t" + launch)
    run = "$(PYTHON) -m torch.distributed.run t.py\n"
    assert new == "train:\n\t# " + run + "\t" + run
    launch = "RUN python3 -m torch.distributed.launch --use_env t.py\n"
    new, _ = rewrite_launch_text("# " + launch + launch)
    assert new == "# RUN torchrun t.py\nRUN torchrun t.py\n"


def test_readme_finding_says_drop_use_env():
    text = ("```bash\n"
            "python -m torch.distributed.launch --nproc_per_node=8 \\\n"
            "    --use_env train.py\n"
            "python -m torch.distributed.launch --nproc_per_node=8 train.py\n"
            "# python -m torch.distributed.launch --use_env train.py\n"
            "```\n")
    findings = report_doc_text(text)
    assert [(f.line, "drop --use_env" in f.message) for f in findings] == [(2, True), (4, False), (5, True)]
    assert all(not f.fixed for f in findings)
