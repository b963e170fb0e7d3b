"""The files of one cross-module migration migrate together or none does: a helper keeps its
signature (A2A126, naming the call) when a caller in another file cannot pass the scaler, because
that caller's `apex` is a local apex.py (A2A160), its amp code is held back, or it has no amp code
to make a scaler; the modules that import the helper then keep their `amp.initialize` (A2A117),
and so on through the run."""
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

    from engine import train_one_epoch


    def main(model, optimizer, loader):
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
        train_one_epoch(model, loader, optimizer)
'''


def _write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(textwrap.dedent(text).lstrip())


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "migrate", *args], capture_output=True, text=True)


def _tree(root):
    return {os.path.relpath(os.path.join(d, f), root): open(os.path.join(d, f), "rb").read()
            for d, _, fs in os.walk(root) for f in fs if f.endswith(".py")}


def _rewrite_changes_nothing(root):
    before = _tree(root)
    check = _cli("check", str(root))
    res = _cli("rewrite", str(root))
    assert res.returncode == 1 and check.returncode == 1, res.stdout + res.stderr
    assert _tree(root) == before, res.stdout
    return res.stdout


def test_caller_whose_apex_is_a_local_file_keeps_the_helper_on_apex(tmp_path):
    _write(tmp_path, "engine.py", ENGINE)
    _write(tmp_path, "train.py", TRAIN)
    _write(tmp_path, "tools/apex.py", '''
        class amp:
            @staticmethod
            def initialize(model, optimizer, **kwargs):
                return model, optimizer
    ''')
    _write(tmp_path, "tools/finetune.py", '''
        from apex import amp

        from engine import train_one_epoch


        def finetune(model, optimizer, loader):
            model, optimizer = amp.initialize(model, optimizer)
            train_one_epoch(model, loader, optimizer)
    ''')
    out = _rewrite_changes_nothing(tmp_path)
    assert "engine.py:5:1: A2A126 `train_one_epoch` needs the scaler, but tools/finetune.py:8 calls it" in out, out
    assert "train.py:7:24: A2A117 `engine` keeps apex amp code" in out, out
    assert "tools/finetune.py:1:1: A2A160" in out


def test_caller_held_back_by_a_suppression_keeps_the_helper_on_apex(tmp_path):
    _write(tmp_path, "engine.py", ENGINE)
    _write(tmp_path, "train.py", TRAIN)
    _write(tmp_path, "finetune.py", '''
        from apex import amp

        import engine


        def finetune(model, optimizer, loader):
            model, optimizer = amp.initialize(model, optimizer)  # apex2amp: ignore[A2A101]
            engine.train_one_epoch(model, loader, optimizer)
    ''')
    out = _rewrite_changes_nothing(tmp_path)
    # the helper's module names the caller that keeps apex (which of the two engine passes says it first
    # differs: the caller's module, or the call's file and line)
    assert ("but finetune.py:8 calls it from a module that keeps its apex code" in out
            or "`finetune` calls this module's functions and keeps its apex amp code" in out), out


def test_caller_without_amp_code_keeps_the_helper_on_apex(tmp_path):
    _write(tmp_path, "engine.py", ENGINE)
    _write(tmp_path, "train.py", TRAIN)
    _write(tmp_path, "warmup.py", '''
        from engine import train_one_epoch as one_epoch


        def warmup(model, optimizer, loader):
            one_epoch(model, loader, optimizer)
    ''')
    out = _rewrite_changes_nothing(tmp_path)
    assert "but warmup.py:5 calls it" in out, out


def test_a_refusal_spreads_to_the_next_helper_the_held_module_calls(tmp_path):
    # engine keeps apex for tools/finetune.py, so train.py keeps amp.initialize, so its call of
    # ckpt.save_checkpoint cannot pass the scaler either: ckpt keeps apex too
    _write(tmp_path, "engine.py", ENGINE)
    _write(tmp_path, "ckpt.py", '''
        import torch
        from apex import amp


        def save_checkpoint(path, model):
            torch.save({"model": model.state_dict(), "amp": amp.state_dict()}, path)
    ''')
    _write(tmp_path, "train.py", '''
        from apex import amp

        from ckpt import save_checkpoint
        from engine import train_one_epoch


        def main(model, optimizer, loader):
            model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
            train_one_epoch(model, loader, optimizer)
            save_checkpoint("last.pt", model)
    ''')
    _write(tmp_path, "tools/apex.py", "amp = None\n")
    _write(tmp_path, "tools/finetune.py", '''
        from apex import amp
        from engine import train_one_epoch


        def finetune(model, optimizer, loader):
            train_one_epoch(model, loader, optimizer)
    ''')
    out = _rewrite_changes_nothing(tmp_path)
    assert "engine.py:5:1: A2A126" in out and "ckpt.py:5:1: A2A126 `save_checkpoint` needs the scaler, but " \
        "train.py:10 calls it" in out, out


def test_every_caller_migrating_still_threads_the_scaler(tmp_path):
    _write(tmp_path, "engine.py", ENGINE)
    _write(tmp_path, "train.py", TRAIN)
    _write(tmp_path, "finetune.py", TRAIN.replace("def main", "def finetune"))
    res = _cli("rewrite", str(tmp_path))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "def train_one_epoch(model, loader, optimizer, scaler):" in (tmp_path / "engine.py").read_text()
    for f in ("train.py", "finetune.py"):
        assert "train_one_epoch(model, loader, optimizer, scaler=scaler)" in (tmp_path / f).read_text()
    assert "A2A126" not in res.stdout


def test_caller_that_refuses_only_once_it_knows_the_helper_keeps_the_helper_on_apex(tmp_path):
    # main.py calls the helper from module level, where no scaler exists (A2A117 once it learns that
    # the helper takes one): the helper's new parameter would break that call
    _write(tmp_path, "engine.py", ENGINE)
    _write(tmp_path, "main.py", '''
        from apex import amp

        from engine import train_one_epoch


        def setup(model, optimizer):
            model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
            return model, optimizer


        model, optimizer = setup(MODEL, OPTIMIZER)
        train_one_epoch(model, LOADER, optimizer)
    ''')
    out = _rewrite_changes_nothing(tmp_path)
    assert "engine.py:5:1: A2A126 `train_one_epoch` needs the scaler, but main.py:12 calls it" in out, out
