"""A trainer class holding the amp code, its `amp.initialize` in the script that builds it (the shape of
2019-2020 text-classification repositories, with an __init__.py beside the script): `Trainer.__init__`
takes the scaler (A2A185) and the script passes the GradScaler it makes where `amp.initialize` ran. End to
end through the CLI: both files migrate together, equal to the hand migration step by step in fp32, O1 and
O2, and in O1 within the clip coefficient's 1e-6 of apex (the clip stays on every micro-batch, A2A148)."""
import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from migrate.verify import collect_losses  # noqa: E402

CASE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "runnable",
                    "trainer_class_scaler")
MODES = {"fp32": [], "O1": ["--fp16"], "O2": ["--fp16", "--fp16_opt_level", "O2"]}


def _read(path):
    with open(path, encoding="utf-8") as fh:
        return fh.read()


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory):
    dst = str(tmp_path_factory.mktemp("trainer_class_scaler") / "legacy")
    shutil.copytree(os.path.join(CASE, "legacy"), dst)
    r = subprocess.run([sys.executable, "-m", "migrate", "rewrite", dst], capture_output=True, text=True)
    assert r.returncode == 1 and " 0 need review" in r.stdout, r.stdout + r.stderr
    assert "A2A185" in r.stdout and "A2A121" in r.stdout, r.stdout
    trainer, script = _read(os.path.join(dst, "lib", "trainer.py")), _read(os.path.join(dst, "train.py"))
    assert "apex" not in trainer.split('"""', 2)[2] and "apex" not in script.split('"""', 2)[2]
    assert "scaler=None" in trainer and "self.scaler = scaler" in trainer
    assert "scheduler=scheduler, scaler=scaler)" in script
    return dst


def _records(folder, mode):
    return [(r["losses"], r["skipped"], r["scale"])
            for r in collect_losses(folder, "train.py", MODES[mode], steps=6, device="cpu")[0]]


@pytest.mark.parametrize("mode", list(MODES))
def test_trainer_and_script_equal_hand_migration(rewritten, mode):
    tool = _records(rewritten, mode)
    assert len(tool) == 6 and tool == _records(os.path.join(CASE, "migrated"), mode)


def test_o1_tracks_apex(rewritten):
    apex_side = [x for r in _records(os.path.join(CASE, "legacy"), "O1") for x in r[0]]
    tool = [x for r in _records(rewritten, "O1") for x in r[0]]
    assert len(tool) == len(apex_side) == 12
    assert all(abs(a - b) <= 1e-4 * abs(a) for a, b in zip(apex_side, tool)), list(zip(apex_side, tool))


def test_the_scaler_is_kept_after_the_docstring_and_super_init(tmp_path):
    (tmp_path / "trainer.py").write_text(
        "import torch\nfrom apex import amp\n\n\nclass Base:\n    pass\n\n\nclass Trainer(Base):\n"
        "    def __init__(self, model, optimizer):\n        \"\"\"Keeps the model and optimizer.\"\"\"\n"
        "        super().__init__()\n        self.model = model\n        self.optimizer = optimizer\n\n"
        "    def train_epoch(self, loader):\n        for x, y in loader:\n"
        "            loss = torch.nn.functional.mse_loss(self.model(x), y)\n"
        "            with amp.scale_loss(loss, self.optimizer) as scaled_loss:\n                scaled_loss.backward()\n"
        "            self.optimizer.step()\n")
    (tmp_path / "run.py").write_text(
        "import torch\nfrom apex import amp\n\nfrom trainer import Trainer\n\n\ndef main(model, loader):\n"
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    model, optimizer = amp.initialize(model, optimizer, opt_level=\"O1\")\n"
        "    Trainer(model, optimizer).train_epoch(loader)\n")
    r = subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 1 and "A2A185" in r.stdout, r.stdout + r.stderr
    assert "    def __init__(self, model, optimizer, scaler):\n        \"\"\"Keeps the model and optimizer.\"\"\"\n" \
           "        super().__init__()\n        self.scaler = scaler\n        self.model = model\n" \
        in _read(str(tmp_path / "trainer.py"))
    assert "Trainer(model, optimizer, scaler=scaler)" in _read(str(tmp_path / "run.py"))
