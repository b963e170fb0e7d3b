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


def test_unsafe_fixes_counted_beside_the_default_run(tmp_path, capsys):
    """`--unsafe-fixes` adds what a run with the flag migrates; the default figures stay the headline."""
    tree = tmp_path / "tree"
    tree.mkdir()
    fixture = os.path.join(REPO, "fixtures", "accum_clip", "plain_accum_clip.before.py")
    with open(fixture, encoding="utf-8") as fh:
        text = fh.read()
    # the fix that keeps the clip in place (A2A148) suppressed at the clip: only the unsafe move is left
    text = text.replace("clip_grad_norm_(model.parameters(), 1.0)\n",
                        "clip_grad_norm_(model.parameters(), 1.0)  # apex2amp: ignore[A2A148]\n", 1)
    assert "ignore[A2A148]" in text
    (tree / "train.py").write_text(text)
    cov = _coverage()
    sites = len(cov.sites_of(text))
    default = cov.measure(str(tree))
    assert (default["sites"], default.get("migrated", 0), default["reported"], default.get("silent", 0)) == \
        (sites, 0, sites, 0)
    unsafe = cov.measure(str(tree), unsafe_fixes=True)
    assert (unsafe.get("migrated", 0), unsafe.get("silent", 0)) == (sites, 0)
    assert cov.main([str(tree), "--unsafe-fixes"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[-2:] == ["+unsafe", "silent"]
    row = out[1].split()  # tree sites migrated share reported silent, then the --unsafe-fixes run's two
    assert row[1:] == [str(sites), "0", "0%", str(sites), "0", str(sites), "0"]
    assert out[-1] == f"with --unsafe-fixes: {sites}/{sites} migrated (100%), 0 silent"
