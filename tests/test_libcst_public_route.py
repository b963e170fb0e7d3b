"""With libcst's private internals turned off (APEX2AMP_PUBLIC_LIBCST=1), every golden fixture pair
still comes out byte for byte: the public-API route of codemods/libcst_private.py is the one a
libcst of an unknown version takes."""
from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = """
import sys
sys.path.insert(0, 'tests')
from codemods import libcst_private
assert not libcst_private.PRIVATE and libcst_private.CodegenState is None
from golden import check_case, collect
cases = collect()
for case in cases:
    check_case(case)
print('goldens', len(cases))
"""


def test_goldens_pass_on_libcsts_public_api_alone():
    env = dict(os.environ, APEX2AMP_PUBLIC_LIBCST="1", PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert int(proc.stdout.split()[-1]) > 100


def test_an_unset_switch_uses_the_private_codegen_on_a_known_libcst():
    env = {k: v for k, v in os.environ.items() if k != "APEX2AMP_PUBLIC_LIBCST"}
    env["PYTHONPATH"] = ROOT
    code = ("from importlib.metadata import version\n"
            "from codemods import libcst_private as p\n"
            "known = '.'.join(version('libcst').split('.')[:2]) in p.KNOWN_VERSIONS\n"
            "print(known, p.PRIVATE)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    known, private = out.stdout.split()
    assert known == private
