"""Summed test durations per module and per category from a `pytest --durations=0` output.

    python -m pytest -q -n 2 --durations=0 > durations.txt
    python benchmarks/slow_modules.py durations.txt            # the table by category and module
    python benchmarks/slow_modules.py durations.txt --write    # also rewrite tests/slow_modules.txt

tests/slow_modules.txt (modules of 5 s or more, longest first) is what tests/conftest.py reads to start
the long modules first under xdist."""
from __future__ import annotations

import collections
import os
import re
import sys

ROW = re.compile(r"^([\d.]+)s (call|setup|teardown)\s+(\S+)", re.M)
OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "slow_modules.txt")
# category: what the module's slow part is (first match wins)
CATEGORIES = [
    ("torchrun / mp.spawn", re.compile(r"dist|launch|fsdp2|rpc|slurm")),
    ("verify CLI", re.compile(r"verify|demo")),
    ("runnable pairs", re.compile(r"runnable|resume")),
    ("CLI / pre-commit / venv subprocesses", re.compile(r"cli|precommit|libcst|explain|hazards|lint")),
]


def category(module: str) -> str:
    for name, pattern in CATEGORIES:
        if pattern.search(os.path.basename(module)):
            return name
    return "other (in-process)"


def per_module(text: str) -> collections.Counter:
    sums = collections.Counter()
    for m in ROW.finditer(text):
        sums[m.group(3).split("::")[0]] += float(m.group(1))
    return sums


def main(argv) -> int:
    text = open(argv[1], encoding="utf-8").read()
    sums = per_module(text)
    cats = collections.Counter()
    for module, secs in sums.items():
        cats[category(module)] += secs
    print(f"total {sum(sums.values()):.0f} s in {len(sums)} modules")
    for name, secs in cats.most_common():
        print(f"{secs:8.0f} s  {name}")
    for module, secs in sums.most_common(25):
        print(f"{secs:8.1f} s  {module}")
    if "--write" in argv:
        with open(OUT, "w", encoding="utf-8") as f:
            f.write("# seconds module (benchmarks/slow_modules.py; read by tests/conftest.py)\n")
            for module, secs in sums.most_common():
                if secs >= 5:
                    f.write(f"{secs:.1f} {module}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
