"""A module-level function that would take the scaler keeps its signature when another file of the
run uses it as a value (a callback, `functools.partial`, a list of callbacks, a registry entry, an
attribute read of its module): its callers are out of reach, so its module and the modules that
migrate with it keep apex, byte for byte, with an A2A126 finding that names the file and line."""
import os
import subprocess
import sys
import textwrap

import pytest

TRAIN_UTILS = '''
    import torch
    from apex import amp


    def train_step(model, batch, optimizer):
        x, y = batch
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()
        return loss.item()
'''

HEAD = '''
    import functools

    from apex import amp

    import train_utils
    from engine_lib import Engine
    from train_utils import train_step


    def main(model, optimizer, loader):
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
'''

USES = {
    "callback": "engine = Engine(train_step)",
    "partial": "engine = Engine(functools.partial(train_step, model, optimizer=optimizer))",
    "callbacks_list": "engine = Engine(callbacks=[train_step])",
    "registry": "REGISTRY = {}\n    REGISTRY[\"default\"] = train_step",
    "module_attribute": "engine = Engine(train_utils.train_step)",
}


def _write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(textwrap.dedent(text).lstrip())


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "migrate", *args], capture_output=True, text=True)


@pytest.mark.parametrize("use", sorted(USES))
def test_function_used_as_a_value_in_another_file_keeps_its_signature(tmp_path, use):
    _write(tmp_path, "train_utils.py", TRAIN_UTILS)
    _write(tmp_path, "main.py", HEAD + "    " + USES[use] + "\n")
    before = {p: (tmp_path / p).read_bytes() for p in ("train_utils.py", "main.py")}
    res = _cli("rewrite", str(tmp_path))
    assert res.returncode == 1, res.stdout + res.stderr
    assert {p: (tmp_path / p).read_bytes() for p in before} == before, res.stdout
    assert "train_utils.py:5:1: A2A126 `train_step` needs the scaler, but main.py:" in res.stdout, res.stdout
    assert "main.py:11:24: A2A117 `train_utils` keeps apex amp code" in res.stdout, res.stdout


def test_value_use_in_a_file_without_amp_refuses_too(tmp_path):
    _write(tmp_path, "train_utils.py", TRAIN_UTILS)
    _write(tmp_path, "hooks.py", '''
        from train_utils import train_step as step

        STEPS = {"default": step}
    ''')
    _write(tmp_path, "main.py", '''
        from apex import amp
        from train_utils import train_step


        def main(model, optimizer, loader):
            model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
            for batch in loader:
                train_step(model, batch, optimizer)
    ''')
    before = {p: (tmp_path / p).read_bytes() for p in ("train_utils.py", "main.py", "hooks.py")}
    res = _cli("rewrite", str(tmp_path))
    assert {p: (tmp_path / p).read_bytes() for p in before} == before, res.stdout
    assert "but hooks.py:3 uses it as a value" in res.stdout, res.stdout


def test_plain_calls_from_another_file_still_thread_the_scaler(tmp_path):
    _write(tmp_path, "train_utils.py", TRAIN_UTILS)
    _write(tmp_path, "main.py", '''
        from apex import amp
        from train_utils import train_step


        def main(model, optimizer, loader):
            model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
            losses = [train_step(model, batch, optimizer) for batch in loader]
            return losses
    ''')
    res = _cli("rewrite", str(tmp_path))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "def train_step(model, batch, optimizer, scaler):" in (tmp_path / "train_utils.py").read_text()
    assert "train_step(model, batch, optimizer, scaler=scaler)" in (tmp_path / "main.py").read_text()
    assert "A2A126" not in res.stdout


def test_an_attribute_of_self_with_the_functions_name_is_not_a_value_use(tmp_path):
    """`self.train_step` in another file is that class's own attribute (a dataset's `self.train`
    flag, a method): it cannot be the other module's function, so the migration goes on."""
    _write(tmp_path, "train_utils.py", TRAIN_UTILS)
    _write(tmp_path, "data.py", '''
        class Loader:
            def __init__(self, train_step):
                self.train_step = train_step

            def epoch(self):
                return [self.train_step, cls_step(type(self))]


        def cls_step(cls):
            return cls.train_step
    ''')
    _write(tmp_path, "main.py", '''
        from apex import amp
        from train_utils import train_step


        def main(model, optimizer, loader):
            model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
            for batch in loader:
                train_step(model, batch, optimizer)
    ''')
    res = _cli("rewrite", str(tmp_path))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "A2A126" not in res.stdout, res.stdout
    assert "def train_step(model, batch, optimizer, scaler):" in (tmp_path / "train_utils.py").read_text()
    assert "train_step(model, batch, optimizer, scaler=scaler)" in (tmp_path / "main.py").read_text()


def test_an_attribute_of_another_imported_module_is_not_a_value_use(tmp_path):
    """`tf.train.list_variables(...)` (tensorflow's `train` module) in a checkpoint converter of the
    same run reads another module's attribute: it cannot be train_utils' function, so the migration
    goes on; `train_utils.train_step` read as a value still counts (the first test)."""
    _write(tmp_path, "train_utils.py", TRAIN_UTILS)
    _write(tmp_path, "convert.py", '''
        import numpy as np
        import tensorflow as tf
        import os.path


        def load_tf_weights(path):
            names = [n for n, _ in tf.train_step.list_variables(os.path.abspath(path))]
            return names, np.random.train_step
    ''')
    _write(tmp_path, "main.py", '''
        from apex import amp
        from train_utils import train_step


        def main(model, optimizer, loader):
            model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
            for batch in loader:
                train_step(model, batch, optimizer)
    ''')
    res = _cli("rewrite", str(tmp_path))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "A2A126" not in res.stdout, res.stdout
    assert "def train_step(model, batch, optimizer, scaler):" in (tmp_path / "train_utils.py").read_text()
    assert "train_step(model, batch, optimizer, scaler=scaler)" in (tmp_path / "main.py").read_text()


def test_an_attribute_of_a_rebound_module_name_still_counts(tmp_path):
    """A name bound by an import and rebound elsewhere (`tf = train_utils`) may be the publishing
    module: its `.train_step` read as a value still keeps the signature."""
    _write(tmp_path, "train_utils.py", TRAIN_UTILS)
    _write(tmp_path, "hooks.py", '''
        import tensorflow as tf
        import train_utils

        tf = train_utils
        HOOKS = [tf.train_step]
    ''')
    _write(tmp_path, "main.py", '''
        from apex import amp
        from train_utils import train_step


        def main(model, optimizer, loader):
            model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
            for batch in loader:
                train_step(model, batch, optimizer)
    ''')
    res = _cli("rewrite", str(tmp_path))
    assert "A2A126" in res.stdout, res.stdout
    assert "scaler" not in (tmp_path / "train_utils.py").read_text()
