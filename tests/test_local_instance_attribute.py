"""`.name` read on a fresh instance of a class of the same file (`corpus = cls(...)`, then `corpus.train`)
is that instance's attribute, not the module-level `train` of another module: that function still takes
the scaler (migrate/local_instances.py). Any other receiver still counts as a value use (A2A126)."""
import os
import subprocess
import sys
import textwrap

TRAINER = '''
    import torch
    from apex import amp


    def train(model, batch, optimizer):
        x, y = batch
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()
        return loss.item()
'''

MAIN = '''
    from apex import amp
    from trainer import train


    def main(model, optimizer, loader):
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
        for batch in loader:
            train(model, batch, optimizer)
'''

CORPUS = '''
    import torch


    class Corpus:
        def __init__(self):
            self.train = None

        @classmethod
        def load(cls, data):
            corpus = cls()
            corpus.train = data
            if corpus.train is not None:
                corpus.train = torch.tensor(corpus.train)
            return corpus


    def build(data):
        other = Corpus()
        return other.train
'''

FOREIGN = '''
    import helpers


    def pick(data):
        corpus = helpers.make(data)
        return corpus.train
'''


def _write(root, rel, text):
    with open(os.path.join(root, rel), "w", encoding="utf-8") as fh:
        fh.write(textwrap.dedent(text).lstrip())


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "migrate", *args], capture_output=True, text=True)


def test_attribute_of_a_fresh_local_instance_is_no_value_use(tmp_path):
    for rel, text in (("trainer.py", TRAINER), ("main.py", MAIN), ("corpus.py", CORPUS)):
        _write(tmp_path, rel, text)
    corpus = (tmp_path / "corpus.py").read_bytes()
    res = _cli("rewrite", str(tmp_path))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "A2A126" not in res.stdout, res.stdout
    assert "scaler.scale(loss).backward()" in (tmp_path / "trainer.py").read_text()
    assert "train(model, batch, optimizer, scaler=scaler)" in (tmp_path / "main.py").read_text()
    assert (tmp_path / "corpus.py").read_bytes() == corpus


def test_attribute_of_an_object_from_elsewhere_still_counts(tmp_path):
    for rel, text in (("trainer.py", TRAINER), ("main.py", MAIN), ("picker.py", FOREIGN)):
        _write(tmp_path, rel, text)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    res = _cli("rewrite", str(tmp_path))
    assert "A2A126 `train` needs the scaler, but picker.py:6 uses it as a value" in res.stdout, res.stdout
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
