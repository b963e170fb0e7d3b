"""Pass 1 rewrites the files that may publish repo facts; pass 2 redoes only those a fact reaches.

A file that names no function another file published keeps its pass-1 rewrite (it is parsed
once); a call site of a published function is rewritten again with the facts. Kept rewrites are
written like any other, and not over a file that changed on disk in the meantime.
"""
from __future__ import annotations

import collections
import textwrap

import libcst as cst
import pytest

from migrate import cross_module, engine, prefilter, source_rewrite
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
    monkeypatch.setattr(source_rewrite.cst, "parse_module", lambda text: parsed.update([text]) or real(text))
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


def test_a_kept_rewrite_is_not_written_over_a_file_changed_since(tmp_path, monkeypatch):
    _tree(tmp_path)
    real = cross_module.still_valid

    def then_edit(*args):
        kept = real(*args)
        (tmp_path / "alone.py").write_text("print('edited meanwhile')\n")
        return kept
    monkeypatch.setattr(cross_module, "still_valid", then_edit)
    res = run([str(tmp_path)], RunConfig(jobs=1, write=True))
    alone = next(fr for fr in res.files if fr.path.endswith("alone.py"))
    assert alone.error and "changed on disk" in alone.error and not alone.written
    assert (tmp_path / "alone.py").read_text() == "print('edited meanwhile')\n"
    assert res.exit_code() == 2


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
    monkeypatch.setattr(source_rewrite.cst, "parse_module", lambda text: parsed.update([text]) or real(text))
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
