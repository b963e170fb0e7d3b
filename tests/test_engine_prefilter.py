"""The prefilter skips nothing: every fixture gives the same output with and without it.

"Without" means every selected codemod runs on every file, whatever its bytes. Findings, new text
and errors must be identical, for single texts (fixture inputs, unchanged cases, runnable legacy and
migrated scripts) and for whole runs over the runnable trees (where pass 1 facts cross files).
"""
from __future__ import annotations

import glob
import os
import shutil

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from codemods.base import Options
from migrate import prefilter
from migrate.engine import RunConfig, Selection, rewrite_source, run

import golden

FIXTURES = golden.ROOT
RUNNABLE = sorted(glob.glob(os.path.join(FIXTURES, "runnable", "*", "*", "**", "*.py"), recursive=True))


def _options(case: golden.Case):
    opts = case.options()
    module_name = opts.pop("module_name", case.name)
    return module_name, Options(**{k: (tuple(v) if k == "min_torch" else v) for k, v in opts.items()})


def _summary(res):
    return (res.new_text, res.error,
            [(f.code, f.line, f.col, f.message, f.fixed, f.ignored, f.new_line) for f in res.findings])


@pytest.mark.parametrize("case", golden.collect(), ids=lambda c: c.id)
def test_fixture_same_with_and_without_prefilter(case):
    module_name, options = _options(case)
    kw = dict(path=f"{case.id}.py", module_name=module_name, options=options, select=Selection())
    on = rewrite_source(case.before, prefilter_enabled=True, **kw)
    off = rewrite_source(case.before, prefilter_enabled=False, **kw)
    assert _summary(on) == _summary(off)
    if case.after is not None:  # the migrated side too (what the safety gate's second pass sees)
        on2 = rewrite_source(case.after, prefilter_enabled=True, **kw)
        off2 = rewrite_source(case.after, prefilter_enabled=False, **kw)
        assert _summary(on2) == _summary(off2)


@pytest.mark.parametrize("path", RUNNABLE, ids=lambda p: os.path.relpath(p, FIXTURES))
def test_runnable_script_same_with_and_without_prefilter(path):
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    kw = dict(path=path, module_name=os.path.splitext(os.path.basename(path))[0])
    assert _summary(rewrite_source(text, prefilter_enabled=True, **kw)) == \
        _summary(rewrite_source(text, prefilter_enabled=False, **kw))


def _run_summary(result, root):
    return [(os.path.relpath(fr.path, root), fr.changed, fr.new_text if fr.changed else "", fr.error,
             [(f.code, f.line, f.col, f.message, f.fixed) for f in fr.findings]) for fr in result.files]


@pytest.mark.parametrize("tree", sorted(glob.glob(os.path.join(FIXTURES, "runnable", "*", "legacy"))),
                         ids=lambda p: os.path.relpath(p, FIXTURES))
def test_whole_run_same_with_and_without_prefilter(tree, tmp_path):
    work = tmp_path / "tree"
    shutil.copytree(tree, work)
    on = run([str(work)], RunConfig(jobs=1))
    off = run([str(work)], RunConfig(jobs=1, prefilter=False))
    assert _run_summary(on, str(work)) == _run_summary(off, str(work))


CONTINUED_IMPORTS = [
    "import os, \\\n    apex.amp as amp\n",
    "from \\\n    apex import amp\n",
    "x = 1; from apex_compat import a, \\\r\n  b, \\\r\n  apex\r\n",
    "from timm.data import create_loader, \\\n    Mixup\n",  # apex only in the docstring
    "from timm.data import create_loader, \\\n    Mixup\nx = 'apex'  # import \\\n",
]


@pytest.mark.parametrize("tail", CONTINUED_IMPORTS)
def test_backslash_continued_import_migrates_the_same_with_and_without_prefilter(tail):
    text = '"""Adapted from https://github.com/NVIDIA/apex/tree/master/examples."""\n' + tail + \
        "with amp.scale_loss(loss, optimizer) as scaled_loss:\n    scaled_loss.backward()\n"
    assert _summary(rewrite_source(text)) == _summary(rewrite_source(text, prefilter_enabled=False))


def test_plain_file_is_not_parsed():
    """A file with nothing to migrate is left as it is without being parsed: even a syntax error in
    it is no error of the run (a file naming apex is parsed, and its syntax error is reported)."""
    text = "def clamp(x:\n    return x.clamp(0, 1)\n"
    res = rewrite_source(text)
    assert res.new_text == text and res.error is None and not res.changed
    assert "syntax error" in (rewrite_source("from apex import amp\n" + text).error or "")


def test_files_to_parse_are_the_python_files_pass_one_takes(tmp_path):
    from migrate.engine import files_to_parse
    (tmp_path / "legacy.py").write_text("from apex import amp\nmodel, opt = amp.initialize(model, opt)\n")
    (tmp_path / "example.py").write_text("y = clamp(x)  # an example\n")
    (tmp_path / "run.sh").write_text("python -m torch.distributed.launch --nproc_per_node=2 legacy.py\n")
    (tmp_path / "broken.py").write_bytes(b"\x00\x01 binary")
    assert files_to_parse([str(tmp_path)]) == [str(tmp_path / "legacy.py")]
    assert files_to_parse([str(tmp_path)], RunConfig(prefilter=False)) == [
        str(tmp_path / "example.py"), str(tmp_path / "legacy.py")]


_NAMES = st.sampled_from(["train", "step", "", "run.main", "main", "fit"])


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(st.sampled_from(["a::pkg.trainer", "b::loop", "c::"]), st.lists(_NAMES, max_size=3), max_size=3),
       st.lists(st.sampled_from(["pkg.trainer", "loop", "other"]), max_size=2),
       st.dictionaries(st.sampled_from(["pkg.run.main", "worker", "x."]), st.just(1), max_size=2),
       st.text(alphabet="trainstepmofuxl.kgz \n", max_size=60), st.sampled_from(["", "pkg.trainer.sub", "loop"]))
@example({}, ["pkg.trainer"], {}, "from pkg import trainer\nmodel = amp.initialize(model)", "")
@example({"a::pkg.trainer": ["train"]}, [], {}, "from pkg import trainer\ntrainer.train(x)", "")
@example({}, [], {"pkg.run.main": 1}, "run.main()", "")
@example({}, [], {"x.": 1}, "anything", "")
def test_fact_needles_hold_for_every_file_mentions_fact_takes(funcs, unmigrated, entries, text, module):
    """The rescreen after pass 1 skips a file without any needle before working out its module name:
    every file `mentions_fact` takes must hold one."""
    from codemods.records import RepoFacts
    facts = RepoFacts(scaler_functions=funcs, unmigrated_amp=unmigrated, spawn_entries=entries)
    data = text.encode()
    needles = prefilter.fact_needles(facts)
    if prefilter.mentions_fact(data, facts, module):
        assert any(n in data for n in needles)
