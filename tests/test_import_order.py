"""Imports the rewrite adds keep an isort / ruff-`I`-clean file clean (real `ruff check --select I`)."""
from __future__ import annotations

import glob
import os
import shutil
import subprocess

import pytest

from migrate import rewrite_source

from test_cli_helpers import REPO

RUFF = shutil.which("ruff")
pytestmark = pytest.mark.skipif(RUFF is None, reason="needs ruff (pip install ruff)")

SHAPES = {
    "torch_beside_from_torch": (
        "import argparse\nimport sys\n\nimport numpy as np\nfrom apex import amp\nfrom torch import nn, optim\n\n\n"
        "def train(model, optimizer, data):\n"
        "    model, optimizer = amp.initialize(model, optimizer, opt_level='O1')\n"
        "    for x in data:\n        loss = model(x).sum()\n"
        "        with amp.scale_loss(loss, optimizer) as scaled:\n            scaled.backward()\n"
        "        optimizer.step()\n    print(np.zeros(1), sys.argv, argparse, nn, optim)\n"),
    "os_as_a_new_first_group": (
        "import torch.distributed as dist\nimport torch.multiprocessing as mp\n\n\n"
        "def main(rank, world_size):\n    dist.init_process_group('nccl', rank=rank, world_size=world_size)\n\n\n"
        "if __name__ == '__main__':\n    world_size = 2\n    mp.spawn(main, args=(world_size,), nprocs=world_size)\n"),
}


def _ruff_clean(path: str) -> bool:
    r = subprocess.run([RUFF, "check", "--isolated", "--select", "I", "--quiet", path], capture_output=True, text=True)
    return r.returncode == 0


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_added_import_keeps_a_sorted_file_sorted(tmp_path, name):
    src = SHAPES[name]
    before, after = tmp_path / "before.py", tmp_path / "after.py"
    before.write_text(src)
    assert _ruff_clean(str(before))
    res = rewrite_source(src)
    assert res.error is None and res.new_text != src
    after.write_text(res.new_text)
    assert _ruff_clean(str(after)), res.new_text


def test_golden_fixtures_that_are_sorted_stay_sorted(tmp_path):
    checked = 0
    for p in sorted(glob.glob(os.path.join(REPO, "fixtures", "*", "*.after.py"))):
        before = p[:-len(".after.py")] + ".before.py"
        if not os.path.exists(before) or not _ruff_clean(before):
            continue
        with open(p, encoding="utf-8") as fh:
            text = fh.read()
        if text.count("\nimport ") + text.startswith("import ") <= open(before, encoding="utf-8").read().count(
                "\nimport ") + open(before, encoding="utf-8").read().startswith("import "):
            continue  # no import added
        assert _ruff_clean(p), os.path.relpath(p, REPO)
        checked += 1
    assert checked >= 5
