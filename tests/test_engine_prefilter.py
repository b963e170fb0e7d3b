"""The prefilter skips nothing: every fixture gives the same output with and without it.

"Without" means every selected codemod runs on every file, whatever its bytes. Findings, new text
and errors must be identical, for single texts (fixture inputs, unchanged cases, runnable legacy and
migrated scripts) and for whole runs over the runnable trees (where pass 1 facts cross files).
"""
from __future__ import annotations

import glob
import os
import random
import shutil

import pytest

from codemods.base import Options
from codemods.registry import PREFILTER, may_need_work
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


def test_coarse_equals_registry_regex():
    samples = []
    for p in glob.glob(os.path.join(FIXTURES, "**", "*.py"), recursive=True):
        with open(p, "rb") as fh:
            samples.append(fh.read())
    rng = random.Random(1)
    words = [b"apex", b"amp", b"spawn", b"spawned", b"-1e9", b"1e-9", b"float('-inf')", b'float("-inf")',
             b"cuda.amp", b"torch.cuda import amp", b"local_rank", b"MASTER_PORT", b".half()", b"x", b"\n"]
    for _ in range(2000):
        samples.append(b" ".join(rng.choice(words) for _ in range(rng.randint(0, 6))))
    for data in samples:
        assert prefilter.coarse(data) == may_need_work(data), data[:80]


def test_literal_derivation_covers_every_branch():
    fs = prefilter.FastSearch(PREFILTER)
    assert fs.branches is not None, "the registry regex could not be split: coarse() falls back to it (slower)"
    assert sum(1 for lit, _ in fs.branches if not lit) <= 2, "most branches should have a literal guard"
    assert len(fs.branches) == len(prefilter.split_alternatives(PREFILTER.pattern))


def test_split_alternatives_respects_groups_and_classes():
    assert prefilter.split_alternatives(rb"a(?:b|c)|[|]d|e\|f") == [rb"a(?:b|c)", rb"[|]d", rb"e\|f"]


def test_apex_word_in_prose_does_not_pay_for_apex_codemods():
    from codemods.registry import CODEMODS
    data = b'"""Works with or without apex; see the apex docs."""\nimport torch\n'
    names = {cm.NAME for cm in prefilter.codemods_for(data, CODEMODS, Selection())}
    assert not names & {"amp", "apex_modules", "apex_parallel"}
    data2 = b"import torch\ntry:\n    from apex import amp\nexcept ImportError:\n    amp = None\n"
    names2 = {cm.NAME for cm in prefilter.codemods_for(data2, CODEMODS, Selection())}
    assert {"amp", "apex_modules", "apex_parallel", "imports"} <= names2


def test_plain_file_is_not_parsed(monkeypatch):
    import migrate.engine as engine
    calls = []
    real = engine._parse
    monkeypatch.setattr(engine, "_parse", lambda text: calls.append(1) or real(text))
    text = "def clamp(x):\n    # an example that spawns nothing\n    return x.clamp(0, 1)\n"
    assert rewrite_source(text).new_text == text
    assert calls == []


def test_install_guard_stage_two_needs_apex_in_an_import_error_handler():
    from migrate.prefilter import _install_guard
    docstring_only = b'try:\n    import x\nexcept ImportError:\n    x = None\n\ndef f():\n    """fast (apex) norm"""\n'
    guard = b'try:\n    import torch\nexcept ImportError:\n    raise ImportError("please install apex")\n'
    other_handler = b'try:\n    import y\nexcept ValueError:\n    print("apex")\n'
    assert not _install_guard(docstring_only)
    assert _install_guard(guard)
    assert not _install_guard(other_handler)
    assert _install_guard(b"try:\n    import torch\nexcept ImportError:\n    raise ImportError('APEX')\n")
