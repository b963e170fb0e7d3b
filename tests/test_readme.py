"""README.md says what is true today: its test command is CI's, its diff is what the first command prints
on fixtures/demo, its pre-commit `rev:` is the release tag, and the documents it links exist."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as fh:
        return fh.read()


def _blocks(text, lang):
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


def test_opens_with_the_demo_and_ci_test_commands():
    readme = _read("README.md")
    first, second = _blocks(readme, "bash")[:2]
    assert first.strip() == "python -m pip install . && apex2amp rewrite --diff fixtures/demo"
    ci = [ln for ln in _read(".ci", "run").splitlines() if ln.startswith("python ")][-1]
    assert second.strip() == ci
    head = readme.split("```bash", 1)[0]
    assert "1 means \"changes pending\"" in head.replace("**", "")


def test_diff_is_the_demo_migration():
    readme = _read("README.md")
    shown = _blocks(readme, "diff")[0]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run([sys.executable, "-m", "apex2amp", "rewrite", "--diff", "--no-cache", "fixtures/demo"],
                         capture_output=True, text=True, cwd=ROOT, env=env)
    assert res.returncode == 1, res.stderr
    assert shown == res.stdout
    assert res.stderr.strip().splitlines()[-1] in readme


def test_precommit_rev_and_links():
    readme = _read("README.md")
    assert re.findall(r"^\s*rev: (\S+)", readme, re.M) == ["v0.1.0"]
    for target in re.findall(r"\]\(([^)#]+\.md)\)", readme):
        assert os.path.exists(os.path.join(ROOT, target)), target
