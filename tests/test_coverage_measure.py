"""benchmarks/coverage.py counts uses of apex, not mentions: docstrings, log messages and a vendored
function of the same name are no sites; launch lines in strings are."""
from __future__ import annotations

import importlib.util
import os

from test_cli_helpers import REPO


def _coverage():
    spec = importlib.util.spec_from_file_location("a2a_coverage", os.path.join(REPO, "benchmarks", "coverage.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SOURCE = '''\
import apex
import subprocess


def convert_syncbn_model(module):
    """Like :class:`apex.parallel.SyncBatchNorm`:

        >>> sync_bn_model = apex.parallel.convert_syncbn_model(model)
    """
    for child in module.children():
        convert_syncbn_model(child)
    return module


def wrap(model):
    print("Using apex.parallel.DistributedDataParallel ...")
    return apex.parallel.DistributedDataParallel(model)


def launch():
    subprocess.run(["python", "-m", "torch.distributed.launch", "train.py"])
'''


def test_sites_are_uses_not_mentions():
    assert _coverage().sites_of(SOURCE) == [("apex-import", 1), ("apex-parallel", 17), ("launch", 21)]
