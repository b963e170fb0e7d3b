"""The hazard lint through `apex2amp check`: findings in mixed-precision files only."""
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _check(path):
    return subprocess.run([sys.executable, "-m", "migrate", "check", str(path)], capture_output=True, text=True,
                          cwd=REPO)


def test_check_reports_hazards(tmp_path):
    f = tmp_path / "model.py"
    f.write_text("import torch\n\n\ndef f(s, m):\n    with torch.autocast('cuda', dtype=torch.float16):\n"
                 "        return s.masked_fill(m, -1e9)\n")
    proc = _check(f)
    assert proc.returncode == 1
    assert "model.py:6:" in proc.stdout and "A2A601" in proc.stdout


def test_check_is_quiet_on_fp32_code(tmp_path):
    f = tmp_path / "fp32.py"
    f.write_text("import torch\n\n\ndef f(s, m):\n    return s.masked_fill(m, -1e9)\n")
    proc = _check(f)
    assert proc.returncode == 0, proc.stdout
