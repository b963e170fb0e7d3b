"""Benchmark apex2amp on a tree against floors measured in the same run.

    python benchmarks/bench.py TREE [--runs 3] [--jobs N]

Prints, for whole processes (median of --runs): `check` and `rewrite --diff` with 1 and N jobs
(cold: `--no-cache`), the same with N jobs re-run over unchanged files (warm result cache),
the floor "read every file from Python with libcst imported", the floor "bare libcst parse + codegen
of every file", files/s and MB/s of each, the ratios to the floors and the 1-vs-N-jobs speed-up.
A third floor, "read all + parse N to parse", reads every file and parses and regenerates, with bare
libcst, the N files whose bytes make apex2amp parse them (engine.files_to_parse), whole, in one
process (column "x work").

Nothing in TREE is written (`rewrite --diff` writes nothing). apex2amp's own bytecode is compiled
first (into its __pycache__ folders), so its runs are timed as an installed tool's.

The commands run interleaved, one of each per round, and every ratio is the median of the per-round
ratios: on a shared or throttled machine the floors and the runs see the same conditions.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

READ_FLOOR = """
import sys, libcst, libcst.metadata
for p in open(sys.argv[1]).read().splitlines():
    with open(p, 'rb') as fh:
        fh.read()
"""

PARSE_LOOP = """
for p in open(sys.argv[{listing}]).read().splitlines():
    with open(p, 'rb') as fh:
        data = fh.read()
    try:
        libcst.parse_module(data).code
    except Exception:
        pass
"""

PARSE_FLOOR = "\nimport sys, libcst\n" + PARSE_LOOP.format(listing=1)

WORK_FLOOR = READ_FLOOR + PARSE_LOOP.format(listing=2)  # argv[1]: every file; argv[2]: the files to parse


def python_files(tree: str) -> List[str]:
    """The Python files apex2amp itself would look at under `tree`."""
    from migrate import discovery
    return [d.path for d in discovery.discover([tree]) if d.kind == discovery.PYTHON]


def timed_once(cmd: List[str]) -> float:
    """Wall time of `cmd` as a whole process."""
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
    return time.perf_counter() - t


def compile_sources() -> None:
    """Write apex2amp's bytecode, as `pip install` does: a run from a source checkout with
    PYTHONDONTWRITEBYTECODE set (as on CI images) would otherwise compile every module on every
    start (~0.1 s), which an installed tool never pays."""
    import compileall
    for package in ("migrate", "codemods"):
        compileall.compile_dir(os.path.join(ROOT, package), quiet=1)


def median_ratio(a: List[float], b: List[float]) -> float:
    """Median over rounds of a[i] / b[i] (rounds that b lacks reuse b's median)."""
    mb = statistics.median(b)
    return statistics.median(x / (b[i] if i < len(b) else mb) for i, x in enumerate(a))


def main() -> None:
    ap = argparse.ArgumentParser(description="Benchmark apex2amp check / rewrite --diff against floors.")
    ap.add_argument("tree")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--skip-parse-floor", action="store_true", help="skip the (slow) libcst parse floor")
    a = ap.parse_args()
    files = python_files(a.tree)
    size = sum(os.path.getsize(p) for p in files)
    mb = size / 1e6
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as fh:
        fh.write("\n".join(files))
        listing = fh.name
    from migrate.engine import files_to_parse
    to_parse = files_to_parse([a.tree])
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as fh:
        fh.write("\n".join(to_parse))
        parse_listing = fh.name
    work_row = f"floor: read all + parse {len(to_parse)} to parse"
    py = sys.executable
    compile_sources()
    commands = [("floor: read all (libcst imported)", [py, "-c", READ_FLOOR, listing]),
                (work_row, [py, "-c", WORK_FLOOR, listing, parse_listing])]
    if not a.skip_parse_floor:
        commands.append(("floor: libcst parse + codegen", [py, "-c", PARSE_FLOOR, listing]))
    cache_dir = tempfile.mkdtemp(prefix="apex2amp-bench-cache-")
    for mode, extra in (("check", ["check", "-q"]), ("rewrite --diff", ["rewrite", "--diff", "--no-color"])):
        for jobs in sorted({1, a.jobs}):
            commands.append((f"{mode} -j {jobs}", [py, "-m", "migrate", *extra, "--no-cache", "-j", str(jobs), a.tree]))
        warm = [py, "-m", "migrate", *extra, "--cache-dir", cache_dir, "-j", str(a.jobs), a.tree]
        timed_once(warm)  # fills the cache: the rounds below measure a re-run over unchanged files
        commands.append((f"{mode} -j {a.jobs}, warm cache", warm))
    times: Dict[str, List[float]] = {name: [] for name, _ in commands}
    try:
        for r in range(a.runs):
            for name, cmd in commands:
                if name.startswith("floor: libcst") and r >= 2:
                    continue  # slow and steady: two rounds are enough
                times[name].append(timed_once(cmd))
    finally:
        os.unlink(listing)
        os.unlink(parse_listing)
        shutil.rmtree(cache_dir, ignore_errors=True)
    read = times[commands[0][0]]
    parse = times.get("floor: libcst parse + codegen")
    print(f"tree: {a.tree}: {len(files)} Python files, {mb:.2f} MB; median of {a.runs} interleaved round(s); "
          f"{os.cpu_count()} core(s)")
    work = times[work_row]
    print(f"{'what':40} {'seconds':>8} {'files/s':>9} {'MB/s':>7} {'x read':>7} {'x parse':>8} {'x work':>7}")
    for name, _ in commands:
        t = statistics.median(times[name])
        xp = f"{median_ratio(times[name], parse):8.2f}" if parse else f"{'-':>8}"
        print(f"{name:40} {t:8.2f} {len(files) / t:9.0f} {mb / t:7.2f} {median_ratio(times[name], read):7.2f} {xp} "
              f"{median_ratio(times[name], work):7.2f}")
    if a.jobs > 1:
        for mode in ("check", "rewrite --diff"):
            one, many = times[f"{mode} -j 1"], times[f"{mode} -j {a.jobs}"]
            print(f"speed-up {mode} 1 -> {a.jobs} jobs: {median_ratio(one, many):.2f}x")


if __name__ == "__main__":
    main()
