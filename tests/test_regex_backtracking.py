"""Every regex the codemods and the engine compile finishes quickly on adversarial input.

A pattern with two ways to match the same text (a `#...` comment that may stop anywhere, then the
rest of its line as plain characters) backtracks exponentially when the match fails: on
DeepSpeedExamples' `# model = BertForQuestionAnswering.from_pretrained(args.bert_model,` followed
by more comment lines, the screen of one file ran for minutes. The patterns are tried in a child
process with a deadline far above their normal cost, so a regression fails instead of hanging.
"""
from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODULES = ["codemods.manual_scaling", "codemods.hazards", "migrate.apex_shadow", "migrate.prefilter",
           "codemods.registry", "codemods.launch", "codemods.amp_unresolved", "codemods.walk",
           "migrate.launch_scripts", "migrate.notebook", "codemods.amp", "codemods.imports",
           "codemods.apex_parallel", "codemods.cuda_amp", "codemods.guards", "codemods.names",
           "codemods.hazard_text", "codemods.apex_uses", "codemods.code_layout"]

PROBE = r'''
import importlib, re, signal, sys
units = [b"# plain words in a comment\n", b"# model = f(a,\n", b"#    x = g(b, 'c'\n", b"x = (a # c (\n", b"y = [1, 2 # ]\n",
         b"s = 'a\\'b' (\n", b'"""doc (\n', b"\\\n", b"loss = (a * (b + # c\n", b"scaler = x ** -1e9 # (\n",
         b"masked_fill(m, -1e9 # (\n", b".to( # x\n", b".half( # (\n"]
inputs = []
for u in units:
    inputs += [u * 400, b"model = f(" + u * 200, b"loss = (" + u * 200 + b"\nloss.backward()\n"]
inputs += [b"(" * 3000, b"x = " + b"(a" * 1000 + b"#c\n" * 1000, b"a" * 20000 + b"=", b"-1e" + b"9" * 10000]

class Slow(Exception):
    pass

def alarm(*_):
    raise Slow()

signal.signal(signal.SIGALRM, alarm)
slow = []
for name in sys.argv[1:]:
    for attr, rx in sorted(vars(importlib.import_module(name)).items()):
        if not isinstance(rx, re.Pattern):
            continue
        for data in inputs:
            text = data if isinstance(rx.pattern, bytes) else data.decode("latin-1")
            signal.setitimer(signal.ITIMER_REAL, 5.0)
            try:
                for _ in rx.finditer(text):
                    pass
            except Slow:
                slow.append(f"{name}.{attr} on {data[:30]!r}")
                break
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
print("\n".join(slow))
'''


def test_no_pattern_backtracks_exponentially():
    out = subprocess.run([sys.executable, "-c", PROBE, *MODULES], cwd=ROOT, capture_output=True, text=True,
                         timeout=600, env={**os.environ, "PYTHONPATH": ROOT})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", out.stdout


def test_screening_a_commented_out_call_with_an_open_bracket_is_fast(tmp_path):
    """The DeepSpeed shape: a commented-out call whose bracket never closes, then comment lines. The
    old pattern tried every place each comment could end: 4 such lines took 12 s, 5 over 20 s."""
    src = ("import argparse\n\nparser = argparse.ArgumentParser()\n"
           "parser.add_argument('--local_rank', type=int, default=-1)\n\n\ndef main(args):\n"
           "    # model = BertForQuestionAnswering.from_pretrained(args.bert_model,\n"
           + "    # see the notes on padding checkpoints\n" * 12
           + "    model = build(args)\n    loss = model(args.batch)\n    model.backward(loss)\n")
    (tmp_path / "run_squad.py").write_text(src)
    out = subprocess.run([sys.executable, "-m", "migrate", "check", "--no-cache", str(tmp_path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": ROOT})
    assert out.returncode == 1 and "A2A408" in out.stdout, out.stdout + out.stderr
