"""Pass 1 rewrites the files that may publish repo facts; pass 2 redoes only those a fact reaches.

A file that names no function another file published keeps its pass-1 rewrite (it is parsed
once); a call site of a published function is rewritten again with the facts. Kept rewrites are
written like any other, and not over a file that changed on disk in the meantime.
"""
from __future__ import annotations

import collections
import os
import subprocess
import sys
import textwrap
import time

import libcst as cst
import pytest

from migrate import engine, prefilter
from migrate.engine import RunConfig, run

HELPER = '''
    from apex import amp


    def train_one_epoch(model, loader, optimizer):
        for x in loader:
            loss = model(x).sum()
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
            optimizer.step()
'''
CALLER = '''
    from apex import amp
    from helper import train_one_epoch


    def main(model, optimizer, loader):
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
        train_one_epoch(model, loader, optimizer)
'''
ALONE = '''
    from apex import amp


    def main(model, optimizer, x):
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
        loss = model(x).sum()
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()
'''


def _tree(tmp_path):
    for name, text in (("helper.py", HELPER), ("caller.py", CALLER), ("alone.py", ALONE)):
        (tmp_path / name).write_text(textwrap.dedent(text).lstrip())


def test_call_sites_of_published_functions_get_the_facts(tmp_path):
    _tree(tmp_path)
    res = run([str(tmp_path)], RunConfig(jobs=1))
    assert not res.errors and len(res.changed) == 3
    by_name = {fr.path.rsplit("/", 1)[-1]: fr for fr in res.files}
    assert "train_one_epoch(model, loader, optimizer, scaler=scaler)" in by_name["caller.py"].new_text
    assert "def train_one_epoch(model, loader, optimizer, scaler):" in by_name["helper.py"].new_text
    assert all(fr.exported is None for fr in res.files)  # facts do not travel with the results


def test_only_files_a_fact_reaches_are_parsed_again(tmp_path, monkeypatch):
    _tree(tmp_path)
    real = cst.parse_module
    parsed = collections.Counter()
    monkeypatch.setattr(cst, "parse_module", lambda text: parsed.update([text]) or real(text))
    run([str(tmp_path)], RunConfig(jobs=1))
    texts = {name: (tmp_path / name).read_text() for name in ("helper.py", "caller.py", "alone.py")}
    assert parsed[texts["alone.py"]] == 1 and parsed[texts["helper.py"]] == 1
    assert parsed[texts["caller.py"]] == 2  # pass 1, then pass 2 with helper's facts


def test_transform_publishes_the_functions_that_take_the_scaler():
    text = textwrap.dedent(HELPER).lstrip()
    r = engine.rewrite_source(text, path="/r/helper.py", module_name="helper")
    assert r.changed
    assert r.exported.scaler_functions == {"/r::helper": ["train_one_epoch"]}
    assert r.exported.scaler_params == {"/r::helper": "scaler"}


def test_kept_pass_one_rewrites_are_written(tmp_path):
    _tree(tmp_path)
    res = run([str(tmp_path)], RunConfig(jobs=1, write=True))
    assert not res.errors and all(fr.written for fr in res.changed)
    assert "torch.amp.GradScaler" in (tmp_path / "alone.py").read_text()
    assert "scaler=scaler" in (tmp_path / "caller.py").read_text()


def test_a_kept_rewrite_is_not_written_over_a_file_changed_since(tmp_path):
    """A real `rewrite` pauses after each file it writes (the test-only APEX2AMP_TEST_WRITE_PAUSE);
    once the first file is written the test edits a kept pass-1 rewrite that is still to be written:
    the run leaves the user's edit alone, says so, and exits 2."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    edited = "print('edited meanwhile')\n"
    for attempt, pause in enumerate((1.0, 3.0, 8.0)):
        tree = tmp_path / f"t{attempt}"
        tree.mkdir()
        _tree(tree)
        (tree / "zz_alone.py").write_text(textwrap.dedent(ALONE).lstrip())  # written last
        first = (tree / "alone.py").read_text()
        env = dict(os.environ, PYTHONPATH=root, APEX2AMP_TEST_WRITE_PAUSE=str(pause))
        proc = subprocess.Popen([sys.executable, "-m", "apex2amp", "rewrite", "--no-cache", "-j", "1", "."],
                                cwd=str(tree), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while (tree / "alone.py").read_text() == first and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        in_time = "apex" in (tree / "zz_alone.py").read_text()
        (tree / "zz_alone.py").write_text(edited)
        out, err = proc.communicate(timeout=120)
        if not in_time:  # the run had written it already (a loaded machine): try with a longer pause
            continue
        assert (tree / "zz_alone.py").read_text() == edited
        assert "changed on disk" in err, err
        assert proc.returncode == 2
        assert "scaler=scaler" in (tree / "caller.py").read_text()  # the other files are written
        return
    pytest.fail("the test never edited the file before the run wrote it")


SAVES_WITH_TORCH = '''
    import torch
    from apex import amp


    def main(model, optimizer, x, path):
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
        torch.save(model.state_dict(), path)
'''
PUBLISHES_SAVE = '''
    from apex import amp


    def save(model, optimizer, path):
        torch.save({"model": model.state_dict(), "amp": amp.state_dict()}, path)
'''


def test_a_call_needs_the_function_and_its_module_named(tmp_path, monkeypatch):
    (tmp_path / "ckpt.py").write_text(textwrap.dedent(PUBLISHES_SAVE).lstrip())
    (tmp_path / "main.py").write_text(textwrap.dedent(SAVES_WITH_TORCH).lstrip())
    real = cst.parse_module
    parsed = collections.Counter()
    monkeypatch.setattr(cst, "parse_module", lambda text: parsed.update([text]) or real(text))
    res = run([str(tmp_path)], RunConfig(jobs=1))
    assert not res.errors
    facts = engine.RepoFacts(scaler_functions={str(tmp_path) + "::ckpt": ["save"]})
    assert not prefilter.mentions_fact((tmp_path / "main.py").read_bytes(), facts, "main")
    assert parsed[(tmp_path / "main.py").read_text()] == 1  # `torch.save` is not ckpt's save


@pytest.mark.parametrize("text,module,reached", [
    (b"from ckpt import save\nsave(m)\n", "main", True),
    (b"import pkg.ckpt as c\nc.save(m)\n", "main", True),
    (b"from .ckpt import save\n", "pkg.main", True),
    (b"torch.save(m)\n", "main", False),
    (b"from . import save\nsave(m)\n", "pkg.ckpt.sub", True),  # inside the package: no module named
    (b"from . import save\nsave(m)\n", "other.main", False),
])
def test_mentions_fact_forms(text, module, reached):
    facts = engine.RepoFacts(scaler_functions={"/r::pkg.ckpt": ["save"]})
    assert prefilter.mentions_fact(text, facts, module) == reached
    assert not prefilter.mentions_fact(text, facts, module, skip_keys=("/r::pkg.ckpt",))


def test_relative_import_from_the_package_init_gets_the_scaler(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent(HELPER).lstrip())
    (pkg / "main.py").write_text(textwrap.dedent(CALLER).lstrip().replace("from helper import", "from . import"))
    res = run([str(tmp_path)], RunConfig(jobs=1))
    main = next(f for f in res.files if f.path.endswith("main.py"))
    assert "train_one_epoch(model, loader, optimizer, scaler=scaler)" in main.new_text
