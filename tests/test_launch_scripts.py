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
