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
from hypothesis import example, given, settings
from hypothesis import strategies as st

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


def _samples(seed: int, words, count: int, longest: int):
    """Every fixture's bytes, then `count` random phrases of up to `longest` of `words`."""
    samples = []
    for p in glob.glob(os.path.join(FIXTURES, "**", "*.py"), recursive=True):
        with open(p, "rb") as fh:
            samples.append(fh.read())
    rng = random.Random(seed)
    return samples + [b" ".join(rng.choice(words) for _ in range(rng.randint(0, longest))) for _ in range(count)]


def test_coarse_equals_registry_regex():
    words = [b"apex", b"amp", b"spawn", b"spawned", b"-1e9", b"1e-9", b"float('-inf')", b'float("-inf")',
             b"cuda.amp", b"torch.cuda import amp", b"local_rank", b"MASTER_PORT", b".half()", b"x", b"\n"]
    for data in _samples(1, words, 2000, 6):
        assert prefilter.coarse(data) == may_need_work(data), data[:80]


def test_token_first_screen_wants_what_both_stages_want():
    """`candidate` skips files without any codemod token before stage 1: the codemods a file gets
    must be exactly those of stage 1 then stage 2, for every selection."""
    from codemods.registry import CODEMODS
    words = [b"apex", b"scaler", b"masked_fill", b"spawn", b"-1e9", b"float16", b".backward(", b"autocast",
             b"from apex import amp", b"import torch.multiprocessing as mp", b"--local_rank'", b"x", b"\n"]
    samples = _samples(2, words, 1500, 5)
    for sel in (Selection(), Selection(select=["A2A6"]), Selection(ignore=["A2A1", "A2A4"])):
        for data in samples:
            expected = prefilter.codemods_for(data, CODEMODS, sel) if prefilter.coarse(data) else []
            present = prefilter.candidate(data, CODEMODS, sel)
            got = prefilter.codemods_for(data, CODEMODS, sel, present=present) if present is not None else []
            assert [cm.NAME for cm in got] == [cm.NAME for cm in expected], data[:80]


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


CONTINUED_IMPORTS = [
    ("import os, \\\n    apex.amp as amp\n", True),
    ("from \\\n    apex import amp\n", True),
    ("x = 1; from apex_compat import a, \\\r\n  b, \\\r\n  apex\r\n", True),
    ("from timm.data import create_loader, \\\n    Mixup\n", False),  # apex only in the docstring
    ("from timm.data import create_loader, \\\n    Mixup\nx = 'apex'  # import \\\n", False),
]


@pytest.mark.parametrize("tail,wanted", CONTINUED_IMPORTS)
def test_backslash_continued_import_counts_only_when_its_logical_line_names_apex(tail, wanted):
    from codemods.registry import CODEMODS
    text = '"""Adapted from https://github.com/NVIDIA/apex/tree/master/examples."""\n' + tail + \
        "with amp.scale_loss(loss, optimizer) as scaled_loss:\n    scaled_loss.backward()\n"
    names = {cm.NAME for cm in prefilter.codemods_for(text.encode(), CODEMODS, Selection())}
    assert ("amp" in names) is wanted
    assert _summary(rewrite_source(text)) == _summary(rewrite_source(text, prefilter_enabled=False))


def test_plain_file_is_not_parsed():
    """A file with nothing to migrate is left as it is without being parsed: even a syntax error in
    it is no error of the run (a file naming apex is parsed, and its syntax error is reported)."""
    text = "def clamp(x:\n    # an example that spawns nothing\n    return x.clamp(0, 1)\n"
    res = rewrite_source(text)
    assert res.new_text == text and res.error is None and not res.changed
    assert "syntax error" in (rewrite_source("from apex import amp\n" + text).error or "")


def test_install_guard_stage_two_needs_apex_in_an_import_error_handler():
    from migrate.prefilter import _install_guard
    docstring_only = b'try:\n    import x\nexcept ImportError:\n    x = None\n\ndef f():\n    """fast (apex) norm"""\n'
    guard = b'try:\n    import torch\nexcept ImportError:\n    raise ImportError("please install apex")\n'
    other_handler = b'try:\n    import y\nexcept ValueError:\n    print("apex")\n'
    assert not _install_guard(docstring_only)
    assert _install_guard(guard)
    assert not _install_guard(other_handler)
    assert _install_guard(b"try:\n    import torch\nexcept ImportError:\n    raise ImportError('APEX')\n")


def test_install_guard_stage_two_skips_the_parse_when_apex_is_only_above_every_handler(monkeypatch):
    """timm's train.py: apex in the module docstring's URL, `except ImportError:` for other packages
    further down. No handler's window can hold the word, so the file is not parsed."""
    from codemods import ast_walk
    from migrate.prefilter import _install_guard
    parsed = []
    real = ast_walk.parse_ast.__wrapped__
    monkeypatch.setattr("migrate.prefilter.parse_ast", lambda data: parsed.append(1) or real(data))
    url_above = b'"""(https://github.com/NVIDIA/apex/tree/master/examples)"""\nimport os\n\n' \
        b'try:\n    import wandb\nexcept ImportError:\n    raise ImportError("pip install wandb")\n'
    assert not _install_guard.__wrapped__(url_above)
    assert parsed == []
    line_above = b'try:\n    import amp_C  # from apex\nexcept ImportError:\n    raise\n'
    assert _install_guard.__wrapped__(line_above)  # the line above the handler is in its window
    below = b'try:\n    import amp_C\nexcept ImportError:\n    raise ImportError(\n        "build apex"\n    )\n'
    assert _install_guard.__wrapped__(below)


@pytest.mark.parametrize("text,wanted", [
    ('"""From https://github.com/NVIDIA/apex/tree/master/examples."""\nloss.backward()\n', False),
    ("from apex import amp\nloss.backward()\n", True),
    ("import apex\n", True),
    ("from apex.fp16_utils import *\n", True),
    ("x = 1  # an apex comment\nloss = a * b\nloss.backward()\n", True),  # a scaled backward itself
])
def test_manual_scaling_runs_on_apex_imports_not_on_the_word(text, wanted):
    """The codemod's apex patterns need a name resolved under apex, which only an import binds."""
    from codemods import scaling_bytes
    assert scaling_bytes.may_scale_by_hand.__wrapped__(text.encode()) is wanted
    assert scaling_bytes.may_scale_by_hand.__wrapped__(b"x = 1\n", "apex.fp16_utils.loss_scaler")


HAZARD_SHAPES = [
    # (source, the lint reports something)
    ("import torch\nwith torch.autocast('cuda'):\n    s = s.masked_fill(m, -2 ** 30)\n", True),
    ("import torch\nwith torch.autocast('cuda'):\n    y = w * (a * b) ** 0.5\n", False),
    ("import torch\nwith torch.autocast('cuda'):\n    y = s + m * 2 ** 20\n", True),
    ("import torch\nwith torch.autocast('cuda'):\n    y = x.period * (p / q) ** e\n", False),
    ("import torch\nx = x.to(dtype=torch.float16)\ny = a / (b + 1e-3)\n", False),  # no autocast, no tiny eps
    ("import torch\nx = x.to(dtype=torch.float16)\ny = a / (b + 1e-8)\n", True),
    ("import torch\nx = x.to(dtype=torch.float16)\ny = a / (b + 10 ** -8)\n", True),
    ("import torch\nx = x.to(dtype=torch.float16)\ny = a / (b + 0.000001)\n", True),
    ("import torch\nx = x.half()\nscaler = torch.amp.GradScaler()\n", True),
    ("import torch\nloss = torch.nn.BCELoss()\nt = torch.float16\n", False),  # BCE outside an autocast file
    ("import torch\nscaler = torch.amp.GradScaler()\nloss = torch.nn.BCELoss()\n", True),
    ("import torch\nwith torch.autocast('cuda'):\n    t[m] = 1e9\n", True),
    ("import torch\nt = torch.float16\nu[m] = 2 ** 20\n", True),  # subscript assignment needs no autocast
    ("import torch\nt = torch.float16\ny = a / (b + 0 ** -1)\nz = (-8) ** 0.5 + c\n", False),  # no crash either
    ("import torch\nwith torch.autocast('cuda'):\n    y = x.to(weight_dtype)\nw = torch.float16\n", False),
    ("import torch\nwith torch.autocast('cuda'):\n    y = x.to(x.device, dtype=torch.float16)\n", True),
    ("import torch\nt = torch.float16\nu[m] = x ** 2\nv = 1e9\n", False),  # the big number is not assigned
    ("import torch\nt = torch.float16\nu[m] = float(\n    1e9)\n", True),
    ("import torch\nx = x.to(dtype=torch.float16)\nassert d < 1e-5\n", False),  # a tolerance, not an eps
    ("import torch\nx = x.half()\ny = torch.log(x + 1e-8)\n", True),
    ("import torch\nx = x.half()\ny = torch.log((\n    1e-8) + x)\n", True),
    ("import torch\nwith torch.autocast('cuda'):\n    y = x * 100\nm = float('-inf')\nn = 100000\n", False),
    ("import torch\nwith torch.autocast('cuda'):\n    y = 2 ** 14 * x\n", True),
    ("import torch\nwith torch.autocast('cuda'):\n    y = x * (  # scale\n        12000)\n", True),
    ("import torch\nwith torch.autocast('cuda'):\n    s = torch.where(m, s, -1e9)\n", True),
    ("import torch\nwith torch.autocast('cuda'):\n    s = a[10000] * s\n", False),
]


@pytest.mark.parametrize("text,fires", HAZARD_SHAPES)
def test_hazard_second_stage_is_a_tight_superset_of_the_lint(text, fires):
    from codemods.registry import CODEMODS
    hazards = next(cm for cm in CODEMODS if cm.NAME == "hazards")
    sel = Selection(select=["A2A6"])
    res = rewrite_source(text, select=sel, prefilter_enabled=False)
    assert res.error is None
    reported = bool(res.findings)
    assert reported == fires
    wanted = hazards.wants(text.encode())
    assert wanted or not reported  # never skips a file the lint reports on
    assert wanted == fires  # and lets through no file of these shapes that it does not report on


GUARD_SHAPES = [
    ("try:\n    import torch\nexcept ImportError:\n    raise ImportError('install apex')\n", True),
    ("try:\n    cls = load('apex.optimizers.FusedAdam')\nexcept ImportError as e:\n"
     "    raise ImportError('APEX optimizers require apex') from e\n", False),  # not imports only
    ("try:\n    import torch\nexcept ImportError:\n    raise ImportError('install apex')\nelse:\n    pass\n", False),
    ("try:\n    import torch\nexcept ImportError:\n    print('no apex')\n    x = 1\n", False),  # not raise/expr only
    ("try:\n    import torch\nexcept (ImportError, KeyError):\n    raise ImportError('apex')\n", False),
    ("try:\n    import torch\nexcept ModuleNotFoundError:\n    raise RuntimeError(\n        'apex'\n    )\n", True),
]


@pytest.mark.parametrize("text,unwrapped", GUARD_SHAPES)
def test_install_guard_stage_two_matches_what_the_imports_codemod_unwraps(text, unwrapped):
    from migrate.prefilter import _install_guard
    res = rewrite_source(text, prefilter_enabled=False)
    assert res.changed == unwrapped
    assert _install_guard(text.encode()) == unwrapped


def test_hazard_stage_walks_only_statements_near_candidate_tokens_and_misses_none():
    from codemods import hazard_bytes as hazards
    far = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(200))
    hit = ("import torch\n" + far + "with torch.autocast('cuda'):\n    s = s.masked_fill(\n        m,\n"
           "        -1e9)\n" + far)
    assert hazards.may_have_hazard(hit.encode())
    assert not hazards.may_have_hazard(hit.replace("-1e9", "-1e3").encode())
    # bare carriage returns: the stdlib parser counts them as line ends, so nothing is pruned
    assert hazards._lines_of(b"a = 1\rb = 2\r", hazards._WHERE_B) is None
    assert hazards._lines_of(b"a = 1\r\nb = x.half()\r\n", hazards._WHERE_B) == [2]
    assert hazards.may_have_hazard(hit.replace("\n", "\r").encode())


_TOKEN_ALPHABET = "0123456789_.eE+-*()#[]= \n\t\\'\"infINFtyxobXOB"


@given(st.text(alphabet=_TOKEN_ALPHABET, max_size=60))
@settings(max_examples=3000, deadline=None)
def test_big_or_inf_by_literals_is_the_regex_or_more(text):
    """The literal-driven scan answers what the seven-way regex answers, and only ever more (a power
    behind a comment line)."""
    from codemods import hazard_bytes as hazards
    data = text.encode()
    by_regex = hazards._BIG_OR_INF_B.search(data) is not None
    fast = hazards._big_or_inf(data)
    assert fast or not by_regex
    if "#" not in text:
        assert fast == by_regex


@pytest.mark.parametrize("text,fires", [
    ("x.to(weight_dtype)", False), ('x.to("cuda")', False), ("x.to(f(g(h(i))), torch.half)", True),
    ('x.to("a)", y)', False), ("x.to(  # (\n torch.float16)", True), ("x.half()", True),
    ("x.type(torch.HalfTensor)", True), ('x.to("\\n", y)', True), ("x . to (torch.float16)", True),
    ("x.todo(half)", False), ("x.to(device=torch.device('cuda:0'), dtype=weight_dtype)", False),
])
def test_cast_tokens_read_the_call_arguments(text, fires):
    """A `.to(` call is a cast candidate only when its own arguments spell half/float16; a call the
    scan cannot read (deep brackets, an escape in a string) counts as one."""
    from codemods import hazard_bytes as hazards
    assert hazards._cast_tokens(text.encode()) == fires


@pytest.mark.parametrize("text,fires", [
    ("x[m] = 1e9", True), ("x[m] = -(2 ** 30)", True), ("x[m]=float(\n  1e9)", True),
    ("x[m] = y = 100000", True), ("x[m] = 1", False), ('x[m] = float("-inf")', False), ("x[m] == 1e9", False),
    ("x[m] = (  # c\n -1e9)", True), ("x[m] \\\n = 1.5e5", True), ("x[m] = 0x10000", True),
    ("x[i] = self.a * 100000", False),
])
def test_subscript_big_bytes(text, fires):
    from codemods import hazard_bytes as hazards
    assert (hazards._SUBSCRIPT_BIG_B.search(text.encode()) is not None) == fires


MANUAL_SCALING_SHAPES = [
    # (source, the ast stage lets it through)
    ("loss = a * b\nloss.backward()\n", True),
    ("loss = crit(out, y)\nloss.backward()\n", False),
    ("(loss) = a * s\nloss.backward()\n", True),
    ("loss = (a\n        * b)\nloss.backward()\n", True),
    ("loss = a \\\n    * b\nloss.backward()\n", True),
    ("(loss * s).backward()\n", True),
    ("accelerator = Accelerator(\n    **kw)\naccelerator.backward(loss)\n", False),
    ("self.loss = a * b\nself.loss.backward()\n", False),
    ("class F(Function):\n    def backward(ctx):\n        pass\n\n    def step(self):\n        pass\n", True),
    ("loss = f(*args)\nloss.backward()\n", False),
    ("loss = x.mean()\nloss.mean().backward()\n", False),
    ("l = [\n    a * b,\n]\nl.backward()\n", False),
    ("loss = 'a*b'\nloss.backward()\n", False),
    ("scaler.scale(loss).backward()\n", False),
    ("# undef backward, redef step\nloss = f(x)\nloss.backward()\n", False),
    ("scaler.scale(\n    loss * 2,  # (\n).backward()\n", False),
    ("def f(a, b):\n    return (a * b).backward()\n", True),
    ("x = not (a * b).backward()\n", True),
    ("fs[0](a * b).backward()\n", False),
    ("make(k)(a * b).backward()\n", False),
    ("match (a * b).backward():\n    case _:\n        pass\n", True),
    ("x = 1or(a * b).backward()\n", True),
    ("x = 1if(a * b).backward() else 2\n", True),
    ("x = 0x1for(a * b).backward()\n", True),
    ("make(k) \\\n    (a * b).backward()\n", False),
    ("y = f(x)\n(a * b).backward()\n", True),
    ("y = f(\n    x)\n\n(a * b).backward()\n", True),
    ("x = [(a * b)][0]\n((a) * (b)).backward()\n", True),
]


def test_a_migrated_backward_is_ruled_out_from_the_bytes():
    """`scaler.scale(loss).backward()`, in every migrated file, is a call's result: the safety gate's
    screen of the output must not parse it to learn that."""
    from codemods import scaling_bytes
    assert scaling_bytes._no_scaled_backward(b"with autocast():\n    scaler.scale(loss).backward()\n")
    assert scaling_bytes._no_scaled_backward(b"self.scaler.scale(out['loss']).backward()\n") is False  # a quote: unsure
    # `def backward` / `def step` count where `def` starts a word only
    assert scaling_bytes._no_scaled_backward(b"# undef backward, redef step\nloss = f(x)\nloss.backward()\n")


@pytest.mark.filterwarnings("ignore::SyntaxWarning")  # `1or(...)`: a number glued to a keyword
@pytest.mark.parametrize("text,through", MANUAL_SCALING_SHAPES)
def test_manual_scaling_byte_stage_only_rules_out_what_the_ast_stage_rules_out(text, through):
    from codemods import scaling_bytes
    data = text.encode()
    assert scaling_bytes.may_scale_by_hand.__wrapped__(data) == through
    if scaling_bytes._no_scaled_backward(data):
        assert not through


def _statement_tail_by_regex():
    """The pattern `scaling_bytes._statement_tail` scans by hand (it took 20 ms to compile)."""
    import re
    from codemods.ast_walk import nested
    atom = rb"""(?:[^()\[\]{}'"#\\]|"[^"\\\n]*"|'[^'\\\n]*'|#[^\n]*(?![^\n]))"""
    line_atom = rb"""(?:[^()\[\]{}'"#\\\n]|"[^"\\\n]*"|'[^'\\\n]*'|#[^\n]*(?![^\n]))"""
    brackets = ((rb"\(", rb"\)"), (rb"\[", rb"\]"), (rb"\{", rb"\}"))
    inner = nested(atom, brackets)
    return re.compile(rb"(?:" + line_atom + b"".join(rb"|" + o + inner + c for o, c in brackets)
                      + rb")*(?=\r?\n|\Z)")


_TAIL_RX = _statement_tail_by_regex()
TAIL_SHAPES = ["a * b\nx", "(a\n * b)\n", "f(x[1], {2: (3)})  # c(\n", "'a#b' + \"c'd\"\n", "a \\\n * b\n",
               "f(\n  # (\n  x)\n", "'open\n", "(((((x)))))\n", "((((x))))\n", "(]\n", ")\n", "x\r\ny", "(x",
               "'a\\'b'\n", "[x\n# c\n]\r\n", ""]


@pytest.mark.parametrize("text", TAIL_SHAPES)
def test_statement_tail_scan_is_the_regex(text):
    from codemods import scaling_bytes
    data = text.encode()
    m = _TAIL_RX.match(data, 0)
    assert scaling_bytes._statement_tail(data, 0) == (m.group() if m else None)


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="()[]{}'\"#\\\n\r a*=", max_size=40), st.integers(min_value=0, max_value=3))
def test_statement_tail_scan_is_the_regex_on_any_bytes(text, start):
    from codemods import scaling_bytes
    data = text.encode()
    start = min(start, len(data))
    m = _TAIL_RX.match(data, start)
    assert scaling_bytes._statement_tail(data, start) == (m.group() if m else None)


def test_word_tests_by_find_answer_what_the_lint_regexes_answer():
    from codemods import hazard_bytes as hazards
    texts = [open(p, "rb").read() for p in sorted(glob.glob(os.path.join(FIXTURES, "**", "*.py"), recursive=True))]
    texts += [b"import apex_utils\n", b"# apex\n", b"has_apex = 1\n", b"x.half()\n", b"GradScaler", b""]
    for data in texts:
        assert hazards._autocast_or_scaler(data) == (hazards._AUTOCAST_OR_SCALER_B.search(data) is not None)
        mixed = hazards._autocast_or_scaler(data) or b".half()" in data or b"float16" in data
        assert mixed == (hazards._MIXED_PRECISION_B.search(data) is not None)


def test_files_to_parse_are_the_python_files_pass_one_takes(tmp_path):
    from migrate.engine import files_to_parse
    (tmp_path / "legacy.py").write_text("from apex import amp\nmodel, opt = amp.initialize(model, opt)\n")
    (tmp_path / "example.py").write_text("y = clamp(x)  # an example, no apex\n")
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
