"""Pass 1 facts: a helper in one module that needs the scaler gets a parameter, and call sites in
other modules of the same run pass `scaler=scaler` (direct import, module import, package import)."""
import os
import subprocess
import sys
import textwrap


def _write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(textwrap.dedent(text).lstrip())


def _rewrite(root):
    return subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(root)], capture_output=True, text=True)


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


def test_function_imported_by_name(tmp_path):
    _write(tmp_path, "engine.py", ENGINE)
    _write(tmp_path, "main.py", '''
        import torch
        from apex import amp
        from engine import train_one_epoch


        def main(args, model, optimizer, loader):
            model, optimizer = amp.initialize(model, optimizer, opt_level="O1", enabled=args.amp)
            train_one_epoch(model, loader, optimizer)
    ''')
    res = _rewrite(tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    engine = (tmp_path / "engine.py").read_text()
    main = (tmp_path / "main.py").read_text()
    assert "def train_one_epoch(model, loader, optimizer, scaler):" in engine
    assert "enabled=scaler.is_enabled()" in engine
    assert "scaler.step(optimizer)" in engine and "scaler.update()" in engine
    assert "train_one_epoch(model, loader, optimizer, scaler=scaler)" in main
    assert 'scaler = torch.amp.GradScaler("cuda", enabled=bool(args.amp))' in main
    assert "apex" not in engine + main


def test_package_module_import(tmp_path):
    _write(tmp_path, "pkg/__init__.py", "")
    _write(tmp_path, "pkg/engine.py", ENGINE)
    _write(tmp_path, "train.py", '''
        from apex import amp
        import pkg.engine as engine


        def run(model, optimizer, loader):
            model, optimizer = amp.initialize(model, optimizer)
            engine.train_one_epoch(model, loader, optimizer)
    ''')
    res = _rewrite(tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "engine.train_one_epoch(model, loader, optimizer, scaler=scaler)" in (tmp_path / "train.py").read_text()


def test_second_rewrite_changes_nothing(tmp_path):
    _write(tmp_path, "engine.py", ENGINE)
    _write(tmp_path, "main.py", '''
        from apex import amp
        from engine import train_one_epoch
        model, optimizer = amp.initialize(model, optimizer)
        train_one_epoch(model, loader, optimizer)
    ''')
    assert _rewrite(tmp_path).returncode == 1
    snapshot = {p: (tmp_path / p).read_text() for p in ("engine.py", "main.py")}
    again = _rewrite(tmp_path)
    assert again.returncode in (0, 1)
    assert {p: (tmp_path / p).read_text() for p in snapshot} == snapshot


def test_callee_and_caller_pick_different_scaler_names(tmp_path):
    _write(tmp_path, "engine.py", ENGINE)
    _write(tmp_path, "main.py", '''
        from apex import amp
        from engine import train_one_epoch
        from sklearn_like import StandardScaler

        scaler = StandardScaler()
        model, optimizer = amp.initialize(model, optimizer)
        train_one_epoch(model, loader, optimizer)
    ''')
    assert _rewrite(tmp_path).returncode == 1
    main = (tmp_path / "main.py").read_text()
    assert "grad_scaler = torch.amp.GradScaler(\"cuda\")" in main
    assert "train_one_epoch(model, loader, optimizer, scaler=grad_scaler)" in main


def test_same_module_name_in_two_script_folders(tmp_path):
    # scripts/utils.py takes the scaler after the rewrite; tools/utils.py has nothing to do with apex
    _write(tmp_path, "scripts/utils.py", '''
        from apex import amp


        def save(path, model):
            return {"model": model.state_dict(), "amp": amp.state_dict()}
    ''')
    _write(tmp_path, "scripts/train.py", '''
        from apex import amp
        from utils import save
        model, optimizer = amp.initialize(model, optimizer)
        save("x.pt", model)
    ''')
    _write(tmp_path, "tools/utils.py", '''
        def save(path, model):
            return {"model": model.state_dict()}
    ''')
    _write(tmp_path, "tools/export.py", '''
        import torch
        from utils import save
        scaler = torch.amp.GradScaler("cuda")
        save("y.pt", model)
    ''')
    assert _rewrite(tmp_path).returncode == 1
    assert 'save("x.pt", model, scaler=scaler)' in (tmp_path / "scripts" / "train.py").read_text()
    assert 'save("y.pt", model)\n' in (tmp_path / "tools" / "export.py").read_text()


def test_initialize_stays_when_an_imported_module_keeps_its_amp_code(tmp_path):
    # the wrapper's amp code is held back (here by a suppression; on real code by a finding such as
    # a clip outside the step's window): the amp.initialize whose state it reads must stay as well
    _write(tmp_path, "optim_wrapper.py", '''
        import torch
        from apex import amp


        class AmpOptimizer:
            def __init__(self, optimizer):
                self.optimizer = optimizer

            def step(self, loss):
                with amp.scale_loss(loss, self.optimizer) as scaled_loss:  # apex2amp: ignore
                    scaled_loss.backward()
                self.optimizer.step()
    ''')
    main = '''
        import torch
        from apex import amp
        from optim_wrapper import AmpOptimizer


        def setup(model, optimizer):
            model, optimizer = amp.initialize(model, optimizer, opt_level="O2")
            return model, AmpOptimizer(optimizer)
    '''
    _write(tmp_path, "main.py", main)
    res = _rewrite(tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    assert (tmp_path / "main.py").read_text() == textwrap.dedent(main).lstrip()
    assert "main.py:7:" in res.stdout and "A2A117 `optim_wrapper` keeps apex amp code" in res.stdout
    assert "amp.scale_loss" in (tmp_path / "optim_wrapper.py").read_text()


def test_initialize_is_migrated_when_the_kept_module_is_not_imported(tmp_path):
    _write(tmp_path, "other.py", '''
        from apex import amp


        def backward(loss, optimizer):
            with amp.scale_loss(loss, optimizer) as scaled_loss:  # apex2amp: ignore
                scaled_loss.backward()
    ''')
    _write(tmp_path, "main.py", '''
        import torch
        from apex import amp


        def train(model, optimizer, loader):
            model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
            for x, y in loader:
                loss = torch.nn.functional.mse_loss(model(x), y)
                with amp.scale_loss(loss, optimizer) as scaled_loss:
                    scaled_loss.backward()
                optimizer.step()
    ''')
    _rewrite(tmp_path)
    assert "torch.amp.GradScaler" in (tmp_path / "main.py").read_text()


def test_initialize_stays_when_nothing_in_the_run_steps_its_optimizer(tmp_path):
    # a setup function: the backward and the step are in code this run does not see
    setup = '''
        from apex import amp


        def setup(model, optimizer):
            model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
            return model, optimizer
    '''
    _write(tmp_path, "setup.py", setup)
    res = _rewrite(tmp_path)
    assert (tmp_path / "setup.py").read_text() == textwrap.dedent(setup).lstrip()
    assert "A2A124 no backward or step of the amp optimizer in this module" in res.stdout


MAIN_WITH_INITIALIZE = '''
    import torch
    from apex import amp
    from engine import train_one_epoch


    def main(args, model, optimizer, loader):
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
        train_one_epoch(model, loader, optimizer)
'''


def test_rerun_after_the_helper_alone_was_migrated(tmp_path):
    """The helper was migrated first (`apex2amp rewrite engine.py`, or a commit of its own); a later
    run over the tree finds it already taking the scaler and migrates the caller to pass it."""
    _write(tmp_path, "engine.py", ENGINE)
    _write(tmp_path, "main.py", MAIN_WITH_INITIALIZE)
    first = subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(tmp_path / "engine.py")],
                           capture_output=True, text=True)
    assert first.returncode == 1, first.stdout + first.stderr
    engine = (tmp_path / "engine.py").read_text()
    assert "def train_one_epoch(model, loader, optimizer, scaler):" in engine
    res = _rewrite(tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    main = (tmp_path / "main.py").read_text()
    assert "train_one_epoch(model, loader, optimizer, scaler=scaler)" in main, res.stdout + main
    assert 'scaler = torch.amp.GradScaler("cuda")' in main and "apex" not in main
    assert "A2A124" not in res.stdout
    assert (tmp_path / "engine.py").read_text() == engine
    assert "would rewrite" not in _check(tmp_path).stdout


def _check(root):
    return subprocess.run([sys.executable, "-m", "migrate", "check", "--no-cache", str(root)],
                          capture_output=True, text=True)


HAND_MIGRATED = '''
    import torch


    def train_one_epoch(model, loader, optimizer, grad_scaler=None, *, log_every=10):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            grad_scaler.scale(loss).backward()
            grad_scaler.step(optimizer)
            grad_scaler.update()
'''


def test_hand_migrated_helper_gets_its_own_parameter_name_and_positional_calls_are_left(tmp_path):
    _write(tmp_path, "engine.py", HAND_MIGRATED)
    _write(tmp_path, "main.py", '''
        import torch
        from apex import amp
        from engine import train_one_epoch


        def main(args, model, optimizer, loader, extra):
            model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
            train_one_epoch(model, loader, optimizer)
            train_one_epoch(model, loader, optimizer, extra)
            train_one_epoch(model, *extra)
    ''')
    res = _rewrite(tmp_path)
    main = (tmp_path / "main.py").read_text()
    assert "train_one_epoch(model, loader, optimizer, grad_scaler=scaler)" in main, res.stdout + main
    assert "train_one_epoch(model, loader, optimizer, extra)\n" in main  # the slot is filled already
    assert "train_one_epoch(model, *extra)\n" in main
    assert (tmp_path / "engine.py").read_text().startswith("import torch\n\n\ndef train_one_epoch(model, loader, "
                                                           "optimizer, grad_scaler=None, *,")


def test_native_helper_facts_need_a_scaler_named_parameter_that_scales():
    from codemods.native_scaler import KEYWORD_ONLY, scaler_helpers
    src = b"""
def a(loss, opt, scaler):
    scaler.scale(loss).backward()
def b(img, transform):
    return transform.scale(2)
def c(loss, *, amp_scaler):
    amp_scaler.scale(loss).backward()
def d(loss, scaler):
    return scaler
class K:
    def m(self, loss, scaler):
        scaler.scale(loss).backward()
"""
    assert scaler_helpers(src) == ("scaler", {"a": 2})
    assert scaler_helpers(src.replace(b"def a(loss, opt, scaler):\n    scaler.scale", b"def a(x):\n    x.y")) \
        == ("amp_scaler", {"c": KEYWORD_ONLY})
    assert scaler_helpers(b"def f(:\n scaler.scale(") == (None, {})


def test_caller_alone_in_the_run_finds_the_helper_it_imports(tmp_path):
    """pre-commit passes only the staged caller; the helper, committed earlier, is read from disk
    because the caller's amp.initialize would otherwise be held (A2A124)."""
    _write(tmp_path, "pkg/__init__.py", "")
    _write(tmp_path, "pkg/engine.py", HAND_MIGRATED)
    _write(tmp_path, "pkg/main.py", MAIN_WITH_INITIALIZE.replace("from engine import", "from .engine import"))
    _write(tmp_path, "pkg/unrelated.py", HAND_MIGRATED.replace("train_one_epoch", "other_epoch"))
    res = subprocess.run([sys.executable, "-m", "migrate", "rewrite", "--no-cache", str(tmp_path / "pkg" / "main.py")],
                         capture_output=True, text=True)
    main = (tmp_path / "pkg" / "main.py").read_text()
    assert res.returncode == 1, res.stdout + res.stderr
    assert "train_one_epoch(model, loader, optimizer, grad_scaler=scaler)" in main, res.stdout + main
    assert "A2A124" not in res.stdout and "apex" not in main
    assert (tmp_path / "pkg" / "engine.py").read_text().startswith("import torch")  # read, never written


def test_imported_files_resolve_project_modules_only(tmp_path):
    from migrate.discovery import imported_files
    _write(tmp_path, "proj/__init__.py", "")
    _write(tmp_path, "proj/sub/__init__.py", "")
    _write(tmp_path, "proj/sub/a.py", "")
    _write(tmp_path, "proj/b.py", "")
    _write(tmp_path, "proj/c/__init__.py", "")
    _write(tmp_path, "top.py", "")
    src = b"import os, torch\nfrom . import a\nfrom .. import b\nfrom ..c import x\nimport top\nfrom .... import z\n"
    got = imported_files(str(tmp_path / "proj" / "sub" / "a.py"), src)
    assert [os.path.relpath(p, tmp_path) for p in got] == [
        os.path.join("proj", "sub", "__init__.py"), os.path.join("proj", "sub", "a.py"),  # from . import a
        os.path.join("proj", "__init__.py"), os.path.join("proj", "b.py"),  # from .. import b
        os.path.join("proj", "c", "__init__.py"), "top.py"]  # os, torch, x and z are not project files
    assert imported_files(str(tmp_path / "top.py"), b"def f(:\n") == []
