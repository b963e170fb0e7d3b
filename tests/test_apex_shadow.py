"""A local file named `apex.py` shadows NVIDIA apex only for the modules that can import it as `apex`
(issue 21): the trees of fixtures/apex_shadow/, rewritten and checked by real runs of the CLI."""
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

CASES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "apex_shadow")
LAYOUTS = sorted(n for n in os.listdir(CASES) if os.path.isdir(os.path.join(CASES, n)))


def _cli(root, *args):
    env = dict(os.environ, APEX2AMP_CACHE_DIR=str(root) + ".cache")  # keep the tree itself as the case has it
    return subprocess.run([sys.executable, "-m", "migrate", *args], cwd=str(root), capture_output=True,
                          text=True, env=env)


def _tree(root):
    out = {}
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, root).replace(os.sep, "/")] = fh.read()
    return out


def _copy(case, tmp_path):
    root = tmp_path / case
    shutil.copytree(os.path.join(CASES, case, "before"), root)
    return root


def _shadow_findings(report):
    return sorted(f"{fr['path']}:{f['line']} {f['code']}" for fr in report["files"] for f in fr["findings"]
                  if f["code"] in ("A2A160", "A2A161"))


def _expected(case):
    with open(os.path.join(CASES, case, "findings.txt"), encoding="utf-8") as fh:
        return sorted(ln.strip() for ln in fh if ln.strip() and not ln.startswith("#"))


@pytest.mark.parametrize("case", LAYOUTS)
def test_rewrite_gives_the_after_tree(case, tmp_path):
    root = _copy(case, tmp_path)
    res = _cli(root, "rewrite", ".")
    assert res.returncode == 1, res.stdout + res.stderr
    assert _tree(root) == _tree(os.path.join(CASES, case, "after")), res.stdout + res.stderr
    again = _cli(root, "rewrite", ".")  # the local files are still there: nothing more to do
    assert _tree(root) == _tree(os.path.join(CASES, case, "after")), again.stdout


@pytest.mark.parametrize("case", LAYOUTS)
def test_check_reports_each_import_of_the_local_file(case, tmp_path):
    root = _copy(case, tmp_path)
    res = _cli(root, "check", "--format", "json", ".")
    assert res.returncode == 1, res.stdout + res.stderr
    report = json.loads(res.stdout)
    assert _shadow_findings(report) == _expected(case)
    for fr in report["files"]:
        for f in fr["findings"]:
            if f["code"] in ("A2A160", "A2A161"):
                folder = os.path.dirname(fr["path"])
                local = f"{folder}/apex.py" if folder else "apex.py"
                assert f"`{local}`" in f["message"] or "`apex.py`" in f["message"], f["message"]


def test_package_module_named_apex_does_not_hold_back_the_root_script(tmp_path):
    """engines/apex.py keeps apex amp code this run cannot migrate; train.py at the root imports
    NVIDIA apex (it cannot reach engines/apex.py as `apex`), so its migration goes on."""
    root = _copy("engines_helper_package", tmp_path)
    report = json.loads(_cli(root, "check", "--format", "json", ".").stdout)
    train = next(fr for fr in report["files"] if fr["path"] == "train.py")
    assert train["changed"] and not [f for f in train["findings"] if not f["fixed"]], train
    helper = next(fr for fr in report["files"] if fr["path"] == "engines/apex.py")
    assert not helper["changed"] and any(f["code"] == "A2A118" for f in helper["findings"])


def test_script_that_imports_the_package_module_named_apex_is_still_held_back(tmp_path):
    """What the fix must keep: a module that does import engines/apex.py (whose apex code stays)
    keeps its `amp.initialize`, which that code relies on."""
    root = _copy("engines_helper_package", tmp_path)
    train = root / "train.py"
    train.write_text(train.read_text().replace("from apex import amp\n",
                                               "from apex import amp\n\nfrom engines.apex import backward\n"))
    before = train.read_text()
    res = _cli(root, "check", ".")
    assert "keeps apex amp code this run could not migrate" in res.stdout, res.stdout
    assert train.read_text() == before


def test_the_root_script_migrates_once_the_local_file_is_renamed(tmp_path):
    """The finding's advice works: rename apex.py (and its imports) and the rerun migrates."""
    root = _copy("root_apex_module", tmp_path)
    assert "A2A160" in _cli(root, "check", ".").stdout
    (root / "apex.py").rename(root / "noamp.py")
    for rel in ("train.py", "models/trainer.py"):
        path = root / rel
        path.write_text(path.read_text())  # the imports now mean NVIDIA apex
    res = _cli(root, "rewrite", ".")
    assert res.returncode == 1 and "A2A160" not in res.stdout, res.stdout + res.stderr
    assert "scaler.scale(loss).backward()" in (root / "train.py").read_text()


def test_suppressed_or_ignored_finding_still_leaves_the_module_alone(tmp_path):
    """A suppression comment or `--ignore A2A160` silences the finding, never the safety."""
    root = _copy("root_apex_module", tmp_path)
    train = root / "train.py"
    train.write_text(train.read_text().replace("from apex import amp\n",
                                               "from apex import amp  # apex2amp: ignore[A2A160]\n"))
    before = train.read_text()
    report = json.loads(_cli(root, "check", "--format", "json", ".").stdout)
    assert _shadow_findings(report) == ["models/trainer.py:1 A2A160"]
    _cli(root, "rewrite", "--ignore", "A2A160", ".")
    assert train.read_text() == before
    assert (root / "models" / "trainer.py").read_text() == \
        _tree(os.path.join(CASES, "root_apex_module", "before"))["models/trainer.py"].decode()


def test_other_concerns_still_migrate_in_a_shadowed_module(tmp_path):
    """Only the apex concerns stop where apex is a local file: a deprecated torch.cuda.amp name still
    migrates."""
    root = tmp_path / "tree"
    root.mkdir()
    (root / "apex.py").write_text("amp = None\n")
    (root / "main.py").write_text(textwrap.dedent('''
        import torch
        from apex import amp


        def forward(model, x):
            with torch.cuda.amp.autocast():
                return model(x), amp
    ''').lstrip())
    res = _cli(root, "rewrite", ".")
    text = (root / "main.py").read_text()
    assert "from apex import amp" in text and 'torch.autocast("cuda")' in text, res.stdout + text
    assert "main.py:2:1: A2A160" in res.stdout


def test_a_local_file_that_comes_later_is_not_answered_from_the_cache(tmp_path):
    root = tmp_path / "tree"
    shutil.copytree(os.path.join(CASES, "root_apex_module", "before"), root)
    (root / "apex.py").unlink()
    first = _cli(root, "check", ".")
    assert "would rewrite train.py" in first.stdout, first.stdout
    (root / "apex.py").write_text("amp = None\n")
    second = _cli(root, "check", ".")
    assert "would rewrite" not in second.stdout and "train.py:2:1: A2A160" in second.stdout, second.stdout
