"""Copies of one package (a monorepo's projects) publish the same helper names under different
modules: a caller that cannot pass the scaler holds back the helper its import names, and only
that one; an import that names no file of the project may be any module of that last name, so it
holds back every helper of that name."""
import os
import subprocess
import sys
import textwrap

ENGINE = '''
    import torch
    from apex import amp


    def train_one_epoch(model, loader, optimizer):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
            optimizer.step()
'''

TRAIN = '''
    from apex import amp

    from {pkg}.engine import train_one_epoch


    def main(model, optimizer, loader):
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
        train_one_epoch(model, loader, optimizer)
'''

NO_SCALER_CALLER = '''
    from {module} import train_one_epoch


    def smoke(model, optimizer, loader):
        train_one_epoch(model, loader, optimizer)
'''


def _write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(textwrap.dedent(text).lstrip())


def _copies(root, names=("projA", "projB", "projC")):
    for pkg in names:
        _write(root, f"{pkg}/__init__.py", "")
        _write(root, f"{pkg}/engine.py", ENGINE)
        _write(root, f"{pkg}/train.py", TRAIN.format(pkg=pkg))


def _held(root):
    """engine file -> the A2A126 findings of `check` on it."""
    res = subprocess.run([sys.executable, "-m", "migrate", "check", "--no-cache", "."], cwd=root,
                         capture_output=True, text=True)
    assert res.returncode == 1, res.stdout + res.stderr
    out = {}
    for line in res.stdout.splitlines():
        if " A2A126 " in line:
            out.setdefault(line.split(":", 1)[0], []).append(line)
    return out


def test_each_copy_migrates_when_its_callers_pass_the_scaler(tmp_path):
    _copies(str(tmp_path))
    assert _held(str(tmp_path)) == {}


def test_a_caller_holds_back_only_the_helper_its_import_names(tmp_path):
    _copies(str(tmp_path))
    _write(str(tmp_path), "projB/smoke.py", NO_SCALER_CALLER.format(module="projB.engine"))
    held = _held(str(tmp_path))
    assert "projB/engine.py" in held and any("smoke.py:5" in f for f in held["projB/engine.py"]), held
    assert not any("smoke.py" in f for path, found in held.items() if path != "projB/engine.py" for f in found)


def test_a_caller_whose_import_names_no_file_holds_back_every_helper_of_that_module_name(tmp_path):
    _copies(str(tmp_path))
    _write(str(tmp_path), "scripts/run.py", NO_SCALER_CALLER.format(module="engine"))
    held = _held(str(tmp_path))
    for pkg in ("projA", "projB", "projC"):
        assert any("scripts/run.py:5" in f for f in held.get(f"{pkg}/engine.py", [])), held
