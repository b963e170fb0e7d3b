"""The autocast region starts at the forward pass; where the rewrite cannot place it there (the loss
comes from a model it cannot see, or a backward helper's callers are all in other files) the module
and the files migrating with it keep apex, byte for byte, with a finding (issue 21, class 5)."""
import os
import subprocess
import sys
import textwrap


def _write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(textwrap.dedent(text).lstrip())


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "migrate", *args], capture_output=True, text=True)


def _snapshot(root):
    return {p.name: p.read_bytes() for p in root.iterdir() if p.suffix == ".py"}


BASE_TRAINER = '''
    from apex import amp


    class BaseTrainer:
        def backward(self, loss, optimizer):
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
'''


def test_backward_helper_whose_callers_are_in_another_module_is_refused(tmp_path):
    _write(tmp_path, "base.py", BASE_TRAINER)
    _write(tmp_path, "trainer.py", '''
        import torch
        from apex import amp

        from base import BaseTrainer


        class Trainer(BaseTrainer):
            def __init__(self, model, optimizer):
                self.model, self.optimizer = amp.initialize(model, optimizer, opt_level="O1")

            def train_step(self, x, y):
                loss = torch.nn.functional.mse_loss(self.model(x), y)
                self.optimizer.zero_grad()
                self.backward(loss, self.optimizer)
                self.optimizer.step()
    ''')
    before = _snapshot(tmp_path)
    res = _cli("rewrite", str(tmp_path))
    assert res.returncode == 1, res.stdout + res.stderr
    assert _snapshot(tmp_path) == before, res.stdout
    assert "base.py:6:9: A2A116" in res.stdout and "no caller in this module passes it in" in res.stdout
    assert "trainer.py:9:38: A2A117 `base` keeps apex amp code" in res.stdout, res.stdout


def test_step_mixin_that_runs_the_forward_migrates_with_its_holder(tmp_path):
    _write(tmp_path, "step_mixin.py", '''
        from apex import amp


        class StepMixin:
            def training_step(self, x, y):
                out = self.model(x)
                loss = (out - y).pow(2).mean()
                self.optimizer.zero_grad()
                with amp.scale_loss(loss, self.optimizer) as scaled_loss:
                    scaled_loss.backward()
                self.optimizer.step()
    ''')
    _write(tmp_path, "trainer.py", '''
        import torch
        from apex import amp

        from step_mixin import StepMixin


        class Trainer(StepMixin):
            def __init__(self, model, optimizer, fp16):
                self.model, self.optimizer = amp.initialize(model, optimizer, enabled=fp16)
    ''')
    res = _cli("rewrite", str(tmp_path))
    assert res.returncode == 1, res.stdout + res.stderr
    mixin = (tmp_path / "step_mixin.py").read_text()
    assert ("with torch.autocast(\"cuda\", dtype=torch.float16, enabled=self.scaler.is_enabled()):\n"
            "            out = self.model(x)\n            loss = (out - y).pow(2).mean()\n") in mixin, mixin
    assert "self.scaler.scale(loss).backward()" in mixin
    assert "apex" not in mixin + (tmp_path / "trainer.py").read_text()
    assert "A2A116" not in res.stdout


MAIN = '''
    import torch
    from apex import amp

    import engine


    def main(args, model, optimizer, loader):
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1", enabled=args.amp)
        for x, y in loader:
            engine.train_step(model, x, y, optimizer)
'''


def test_forward_of_the_model_passed_in_migrates_across_modules(tmp_path):
    _write(tmp_path, "engine.py", '''
        import torch
        from apex import amp


        def train_step(model, x, y, optimizer):
            logits = model.forward(x)
            loss = torch.nn.functional.cross_entropy(logits, y)
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
            optimizer.step()
    ''')
    _write(tmp_path, "main.py", MAIN)
    res = _cli("rewrite", str(tmp_path))
    assert res.returncode == 1, res.stdout + res.stderr
    engine = (tmp_path / "engine.py").read_text()
    assert "enabled=scaler.is_enabled()):\n        logits = model.forward(x)\n" in engine, engine
    assert "engine.train_step(model, x, y, optimizer, scaler=scaler)" in (tmp_path / "main.py").read_text()


def test_loss_from_a_model_the_module_cannot_see_refuses_both_files(tmp_path):
    # the forward is a closure made in main.py: wrapping the loss alone would train O1 in fp32
    _write(tmp_path, "engine.py", '''
        import torch
        from apex import amp

        from nets import forward


        def train_step(model, x, y, optimizer):
            logits = forward(x)
            loss = torch.nn.functional.cross_entropy(logits, y)
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
            optimizer.step()
    ''')
    _write(tmp_path, "main.py", MAIN)
    before = _snapshot(tmp_path)
    res = _cli("rewrite", str(tmp_path))
    assert _snapshot(tmp_path) == before, res.stdout
    assert "engine.py:10:5: A2A116" in res.stdout and "main.py:8:24: A2A117" in res.stdout, res.stdout
    check = _cli("check", str(tmp_path))
    assert check.returncode == 1 and "A2A116" in check.stdout
