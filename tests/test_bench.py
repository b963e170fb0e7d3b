"""benchmarks/bench.py runs end to end on a small tree and prints every row (a smoke test, not a timing)."""
from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_bench_prints_floors_runs_ratios_and_speed_up():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "bench.py"), os.path.join(ROOT, "fixtures", "demo"),
                        "--runs", "1", "--jobs", "2"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    for row in ("floor: read all", "floor: read all + parse", "x work", "floor: libcst parse + codegen", "check -j 1", "check -j 2",
                "rewrite --diff -j 1", "rewrite --diff -j 2", "check -j 2, warm cache",
                "rewrite --diff -j 2, warm cache", "speed-up check 1 -> 2 jobs",
                "speed-up rewrite --diff 1 -> 2 jobs"):
        assert row in r.stdout, r.stdout
