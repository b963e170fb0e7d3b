"""The passes after pass 1 (held callers, functions used as values, backward helpers whose callers keep
apex) keep each file's answer in the result cache: a re-run over unchanged files gives what a run
without the cache gives, and so does one after a caller changes or after a file appears that an
unchanged caller's import now names."""
from __future__ import annotations

import os
import textwrap

from migrate.engine import RunConfig, run

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

LOSSES = '''
    from apex import amp


    def backward(loss, optimizer, args):
        if args.fp16:
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
        else:
            loss.backward()
'''

TRAIN = '''
    import torch
    from apex import amp

    from {pkg}.engine import train_one_epoch


    def main(model, loader):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
        train_one_epoch(model, loader, optimizer)
'''

FINETUNE = '''
    import torch
    from apex import amp

    from {pkg}.losses import backward


    def main(model, loader, args):
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
        if args.fp16:
            model, optimizer = amp.initialize(model, optimizer, opt_level="O2")
        for x in loader:
            loss = model(x).sum()
            optimizer.zero_grad()
            backward(loss, optimizer, args)
            optimizer.step()
'''

CALLBACKS = '''
    from {pkg}.engine import train_one_epoch

    HOOKS = {{"train": train_one_epoch}}
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


def _tree(root):
    for pkg in ("projA", "projB", "projC"):
        _write(root, f"{pkg}/__init__.py", "")
        _write(root, f"{pkg}/engine.py", ENGINE)
        _write(root, f"{pkg}/losses.py", LOSSES)
        _write(root, f"{pkg}/train.py", TRAIN.format(pkg=pkg))
        _write(root, f"{pkg}/finetune.py", FINETUNE.format(pkg=pkg))
    _write(root, "projB/hooks.py", CALLBACKS.format(pkg="projB"))
    _write(root, "projA/smoke.py", NO_SCALER_CALLER.format(module="engine"))


def _summary(res):
    return [(os.path.relpath(f.path), f.changed, f.new_text if f.changed else "", f.error,
             [(x.code, x.line, x.col, x.message, x.fixed) for x in f.findings]) for f in res.files]


def _check(root, cache):
    """The warm run's results, after asserting they equal a run's without the cache."""
    warm = _summary(run([root], RunConfig(jobs=1, cache_dir=cache)))
    assert warm == _summary(run([root], RunConfig(jobs=1)))
    return warm


def test_a_warm_run_of_a_cross_module_tree_reports_what_an_uncached_run_does(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root, cache = "src", str(tmp_path / "cache")
    _tree(root)
    cold = _summary(run([root], RunConfig(jobs=1, cache_dir=cache)))
    held = [f for f in cold if f[0].endswith("engine.py") and any(x[0] == "A2A126" for x in f[4])]
    assert len(held) == 3  # projA/smoke.py's `engine` names no file: every helper of that name holds
    assert _check(root, cache) == cold
    assert _check(root, cache) == cold


def test_a_file_that_an_unchanged_caller_now_imports_is_seen(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root, cache = "src", str(tmp_path / "cache")
    _tree(root)
    before = _check(root, cache)
    # `from engine import ...` in projA/smoke.py now names engine.py of the import root, which exports nothing
    _write(root, "engine.py", "def train_one_epoch(model, loader, optimizer):\n    pass\n")
    after = _check(root, cache)
    assert after != before


def test_a_changed_caller_is_looked_at_again(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root, cache = "src", str(tmp_path / "cache")
    _tree(root)
    _check(root, cache)
    _write(root, "projA/smoke.py", NO_SCALER_CALLER.format(module="projB.engine"))
    _check(root, cache)
    _write(root, "projB/hooks.py", "HOOKS = {}\n")
    _check(root, cache)
    # a caller of the backward helper that keeps its amp code now
    _write(root, "projC/finetune.py", FINETUNE.format(pkg="projC").replace("amp.initialize", "amp.init"))
    _check(root, cache)


def test_a_reexport_found_from_the_cache_follows_its_importer(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root, cache = "src", str(tmp_path / "cache")
    _write(root, "pkg/__init__.py", "from apex.optimizers import FusedAdam\n")
    _write(root, "pkg/models.py", "from apex.optimizers import FusedLAMB\n")
    _write(root, "user.py", "from pkg import FusedAdam\n\nopt = FusedAdam([], lr=1e-3)\n")
    kept = _check(root, cache)
    assert not kept[0][1]  # pkg/__init__.py keeps the import user.py takes from it
    _check(root, cache)
    _write(root, "user.py", "import torch\n\nopt = torch.optim.AdamW([], lr=1e-3)\n")
    assert _check(root, cache) != kept
    _write(root, "user.py", "from pkg.models import FusedLAMB\n")
    _check(root, cache)
