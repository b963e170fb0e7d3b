"""Rewriting in regions (migrate.regions): a big file that only statement-local codemods want is
parsed as a reduced module, and the result is the same as the whole-module rewrite's."""
from __future__ import annotations

from contextlib import contextmanager

import pytest

from migrate import engine, regions
from tests.golden import collect, run_case

FILLER = '''

def helper_{i}(x, y=3):
    """Filler that holds no token of any codemod."""
    total = 0
    for k in range(y):
        total += x * k  # a comment
    if total > 10:
        return total - 1
    return total
'''


def big(head: str, middle: str, tail: str = "", n: int = 60) -> str:
    """A module of about n * 10 filler lines with `middle` between the fillers and `tail` at the end."""
    parts = [head]
    parts.extend(FILLER.format(i=i) for i in range(n // 2))
    parts.append(middle)
    parts.extend(FILLER.format(i=i) for i in range(n // 2, n))
    parts.append(tail)
    return "".join(parts)


ARGPARSE_TOP = '''
parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--local_rank", type=int, default=0)  # set by the launcher
'''

ARGPARSE_IN_FUNCTION = '''

def get_args():
    parser = argparse.ArgumentParser()
    # apex2amp: ignore[A2A408]
    parser.add_argument("--local_rank", type=int)
    parser.add_argument('--local-rank', dest="local_rank", required=True)
    return parser.parse_args()
'''

ARGPARSE_IN_LONG_FUNCTION = '''

@functools.lru_cache(maxsize=None)
def parse_args(
    input_args=None,
):  # the options
    # a comment that leads the body
    """Every option of the script."""
    parser = argparse.ArgumentParser()
''' + "".join(f"    parser.add_argument('--option_{i}', type=int, default={i})\n" for i in range(45)) + '''
    # apex2amp: ignore[A2A408]
    parser.add_argument("--local_rank", type=int, required=True)
    if input_args:
        parser.add_argument(
            "--local-rank",  # spelled with a dash
            type=int,
        )
    return parser.parse_args(input_args)


class Options:
    """Options as a class."""

''' + "".join(f"    option_{i} = {i}\n" for i in range(45)) + '''
    def build(self, parser):
        parser.add_argument("--local_rank", default=None)
'''

MAIN = '''

def main():
    args = parser.parse_args()
    torch.cuda.set_device(args.local_rank)


if __name__ == "__main__":
    main()
'''

SHAPES = {
    "top level, os missing": big('"""A training script."""\nimport argparse\n\nimport torch\n', ARGPARSE_TOP, MAIN),
    "top level, os imported": big("import argparse\nimport os\nimport torch\n", ARGPARSE_TOP, MAIN),
    "import os later": big("# header comment\nimport argparse\n\nX = 1\nimport torch\n", ARGPARSE_TOP,
                           MAIN + "import os\n"),
    "import guard": big("import argparse\ntry:\n    import os\nexcept ImportError:\n    os = None\n",
                        ARGPARSE_TOP, MAIN),
    "in a function, suppressed and required": big("import argparse\n\n\nclass A:\n    pass\n",
                                                  ARGPARSE_IN_FUNCTION, MAIN),
    "no imports": big("X = 1\n", ARGPARSE_TOP, MAIN),
    "crlf": big("import argparse\nimport torch\n", ARGPARSE_TOP, MAIN).replace("\n", "\r\n"),
    "tabs": big("import argparse\nimport torch\n", ARGPARSE_TOP, MAIN).replace("    ", "\t"),
    "env already": big("import argparse, os\n", ARGPARSE_TOP.replace(
        '"--local_rank", type=int, default=0',
        '"--local_rank", "--local-rank", type=int, default=int(os.environ.get("LOCAL_RANK", 0))'), MAIN),
    "two statements on a line": big("import argparse; import torch\n", ARGPARSE_TOP, MAIN),
    "no trailing newline": big("import argparse\n", ARGPARSE_TOP, MAIN.rstrip("\n")),
    "a match statement first": big("import argparse\nmatch 1:\n    case 1:\n        pass\n", ARGPARSE_TOP, MAIN),
    "form feeds and a suppression": big("import argparse\n", "\x0c\nY = '\x0c\u2028'\n" + ARGPARSE_TOP.replace(
        'parser.add_argument("--local_rank"', '# apex2amp: ignore[A2A408]\nparser.add_argument("--local_rank"'), MAIN),
    "inside a long function and a class": big("import argparse\nimport functools\n", ARGPARSE_IN_LONG_FUNCTION,
                                              MAIN),
}


@contextmanager
def whole():
    """Within: the engine never rewrites in regions."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(engine, "_rewrite_in_regions", lambda *a, **k: None)
        yield


def outcome(res: engine.Result):
    return (res.new_text, res.error, [(f.code, f.line, f.col, f.new_line, f.fixed, f.ignored, f.message)
                                      for f in res.findings], res.launch_notes)


def parsed_lengths(monkeypatch: pytest.MonkeyPatch):
    seen = []
    real = engine._parse

    def spy(text):
        seen.append(len(text))
        return real(text)
    monkeypatch.setattr(engine, "_parse", spy)
    return seen


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_regions_rewrite_equals_whole_module_rewrite(shape, monkeypatch):
    text = SHAPES[shape]
    seen = parsed_lengths(monkeypatch)
    fast = engine.rewrite_source(text, path="train.py")
    assert seen and max(seen) * 2 < len(text), "the big file went through the reduced module"
    with whole():
        slow = engine.rewrite_source(text, path="train.py")
    assert outcome(fast) == outcome(slow)
    quiet = ("env already", "form feeds and a suppression")  # nothing to do, and a suppressed argument
    assert bool([f for f in slow.findings if not f.ignored]) != (shape in quiet), "the shape holds what it is meant to"
    assert (slow.new_text == text) == (shape in quiet)


def test_regions_keep_what_the_codemod_reads():
    text = SHAPES["import os later"]
    red = regions.reduce(text, ["local_rank"])
    assert red is not None
    assert red.text.startswith("# header comment\nimport argparse\n\nX = 1\n")  # prologue through X = 1
    assert "import torch\n" in red.text and "import os\n" in red.text  # every top-level import
    assert 'parser.add_argument("--local_rank"' in red.text and "def main():" in red.text
    assert "def helper_0(" in red.text  # the first indented block (libcst's default indent)
    assert "def helper_1(" not in red.text and "def helper_59(" not in red.text
    assert red.whole_line(1) == 1
    line = red.text.splitlines().index('parser.add_argument("--local_rank", type=int, default=0)  # set by the launcher')
    assert text.splitlines()[red.whole_line(line + 1) - 1] == red.text.splitlines()[line]


def test_regions_prologue_holds_the_first_indented_block():
    """libcst takes the default indent from the first indented block: the reduced module has it."""
    text = big("import argparse\n\n\ndef first():\n\treturn 1\n", ARGPARSE_TOP, MAIN)
    red = regions.reduce(text, ["local_rank"])
    assert red is not None and "def first():\n\treturn 1\n" in red.text


@pytest.mark.parametrize("text", [
    "import argparse\n" + ARGPARSE_TOP + MAIN,  # small: parsed whole
    big("import argparse\n", ARGPARSE_TOP, MAIN).replace("\n", "\r", 5),  # lone CR line breaks
    big("import argparse\n", ARGPARSE_TOP, MAIN) + "def broken(:\n",  # ast cannot split it
    big("import argparse\n", ARGPARSE_TOP.replace("parser =", "def local_rank_everywhere():\n    parser =")
        .replace("\nparser.add", "\n    parser.add"), MAIN).replace("return total", "return total  # local_rank"),
])
def test_regions_decline(text):
    assert regions.reduce(text, ["local_rank"]) is None


def test_splice_refuses_a_change_between_pieces():
    text = SHAPES["top level, os imported"]
    red = regions.reduce(text, ["local_rank"])
    assert red is not None and len(red.pieces) > 1
    lines = red.text.splitlines(keepends=True)
    boundary = sum(b - a + 1 for a, b in red.pieces[:1])
    inside = red.splice("".join(lines[:2] + ["import sys\n"] + lines[2:]))
    assert inside is not None and "import sys\n" in inside
    assert red.splice("".join(lines[:boundary] + ["X = 2\n"] + lines[boundary:])) is None  # which side?
    assert red.splice("".join(lines[:boundary - 1] + lines[boundary + 1:])) is None  # across two pieces
    assert red.splice(red.text + "Y = 3\n") is None


def test_a_spawn_or_another_codemod_sends_the_file_whole(monkeypatch):
    for text in (SHAPES["top level, os missing"] + "\nimport torch.multiprocessing as mp\n",
                 SHAPES["top level, os missing"].replace("X = 1", "") + "\nmp.spawn(main, nprocs=2)\n",
                 SHAPES["top level, os missing"] + "\nfrom apex import amp\n"):
        seen = parsed_lengths(monkeypatch)
        engine.rewrite_source(text, path="train.py")
        assert seen and max(seen) == len(text)
        monkeypatch.undo()


def test_every_fixture_rewrites_the_same_in_regions(monkeypatch):
    """With the size floor off, every fixture the region path takes must come out as it does whole."""
    cases = collect()
    monkeypatch.setattr(regions, "_MIN_LINES", 0)
    monkeypatch.setattr(regions, "_MAX_KEPT", 1.0)
    monkeypatch.setattr(regions, "_MIN_INNER", 0)
    used = []
    real = regions.reduce

    def counting(text, tokens):
        red = real(text, tokens)
        if red is not None:
            used.append(text)
        return red
    monkeypatch.setattr(regions, "reduce", counting)
    fast = {c.id: outcome(run_case(c)) for c in cases}
    assert len(used) >= 5, "some fixtures take the region path"
    with whole():
        slow = {c.id: outcome(run_case(c)) for c in cases}
    assert fast == slow


class _RegionCodemod:
    """A codemod that reads only the statements holding `--local_rank` (as launch does)."""

    NAME = "test"
    REGION_TOKENS = (b"--local_rank",)
    REGION_BLOCKERS = ()

    def __init__(self, transform):
        self._transform = transform

    def transform(self, wrapper, ctx):
        return self._transform(wrapper.module)


def _append_to_the_argument(module):
    """`default=0` -> `default=0 + 1`, again on every rewrite (a codemod that never settles)."""
    import libcst as cst

    class Bump(cst.CSTTransformer):
        def leave_Arg(self, original, updated):
            if updated.keyword is not None and updated.keyword.value == "default":
                return updated.with_changes(value=cst.BinaryOperation(updated.value, cst.Add(), cst.Integer("1")))
            return updated
    return module.visit(Bump())


def test_the_safety_gate_refuses_an_unsettled_rewrite_made_in_regions(monkeypatch):
    monkeypatch.setattr(engine, "_run_codemods_for", lambda *a, **k: [_RegionCodemod(_append_to_the_argument)])
    seen = parsed_lengths(monkeypatch)
    text = SHAPES["top level, os imported"]
    res = engine.rewrite_source(text, path="train.py")
    assert seen and max(seen) * 2 < len(text)
    assert res.error and "second rewrite" in res.error and res.new_text == text


def test_a_settled_rewrite_made_in_regions_passes_the_gate_on_its_own_tree(monkeypatch):
    """The second rewrite reduces the output to the code the first produced, and reuses its tree."""
    def once(module):
        return module if "0 + 1" in module.code else _append_to_the_argument(module)
    monkeypatch.setattr(engine, "_run_codemods_for", lambda *a, **k: [_RegionCodemod(once)])
    seen = parsed_lengths(monkeypatch)
    text = SHAPES["top level, os imported"]
    res = engine.rewrite_source(text, path="train.py")
    assert res.error is None and "default=0 + 1)" in res.new_text
    assert len(seen) == 1, "one libcst parse: the gate's second rewrite ran on the first one's tree"


def test_a_long_function_keeps_its_header_and_the_statements_that_spell_the_flag():
    text = SHAPES["inside a long function and a class"]
    red = regions.reduce(text, ["--local_rank", "--local-rank"])
    assert red is not None
    assert "def parse_args(\n    input_args=None,\n):  # the options\n" in red.text
    assert "# apex2amp: ignore[A2A408]\n    parser.add_argument(\"--local_rank\"" in red.text  # with its comment
    assert '"--local-rank",  # spelled with a dash' in red.text and "class Options:" in red.text
    assert "--option_3" not in red.text and "option_7 = 7" not in red.text and "leads the body" not in red.text
    assert "@functools.lru_cache" in red.text


def test_code_the_whole_module_path_cannot_handle_is_left_out_of_regions(monkeypatch):
    """The one difference from the whole-module path: a statement libcst cannot take (here a
    1,500-term sum, past its recursion limit) in lines the reduced module leaves out does not stop
    the migration of the flag; parsed whole, the file is left unchanged with an internal error."""
    text = big("import argparse\n", ARGPARSE_TOP, MAIN + "TOTAL = " + " + ".join(["1"] * 1500) + "\n")
    fast = engine.rewrite_source(text, path="train.py")
    assert fast.error is None and [f.code for f in fast.findings] == ["A2A408"]
    with whole():
        slow = engine.rewrite_source(text, path="train.py")
    assert slow.error and "RecursionError" in slow.error and not slow.changed
