"""Time the check after pass 1 (does a file use a fact another file published?) as trees grow.

    python benchmarks/facts_check.py [--files 2900 58000] [--legacy-ratio 0.05]

For each tree size, a share of the files are legacy apex files (tests/treegen.py's shapes) and each
publishes its `train_one_epoch` (as pass 1 does); every legacy file is then checked against all the
facts, as `engine._still_valid` does, with the plain check (`prefilter.mentions_fact`) and with the
index (`migrate.facts_index.FactsIndex`). Prints seconds and the large/small ratios of each.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from codemods.records import RepoFacts  # noqa: E402
from migrate import prefilter  # noqa: E402
from migrate.facts_index import FactsIndex  # noqa: E402
import treegen  # noqa: E402


def shaped(files: int, ratio: float, seed: int = 0):
    rng = random.Random(seed)
    legacy = treegen.legacy_sources()
    facts, texts = RepoFacts(), []
    for i in range(int(round(files * ratio))):
        module = f"pkg{rng.randint(0, 5)}.sub{rng.randint(0, 3)}.train_{i}"
        facts.scaler_functions[module] = ["train_one_epoch"]
        texts.append((module, treegen.vary(legacy[i % len(legacy)], rng).encode()))
    return facts, texts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, nargs="+", default=[2900, 58000])
    ap.add_argument("--legacy-ratio", type=float, default=0.05)
    a = ap.parse_args()
    rows = []
    for n in a.files:
        facts, texts = shaped(n, a.legacy_ratio)
        t0 = time.perf_counter()
        plain = [prefilter.mentions_fact(d, facts, m, (m,)) for m, d in texts]
        t1 = time.perf_counter()
        index = FactsIndex(facts)
        indexed = [index.mentions(d, m, (m,)) for m, d in texts]
        t2 = time.perf_counter()
        assert plain == indexed
        read = sum(len(d) for _, d in texts)
        rows.append((n, len(texts), t1 - t0, t2 - t1, read))
        print(f"{n:>7} files, {len(texts):>5} publishers: plain {t1 - t0:8.3f}s  index {t2 - t1:7.3f}s  "
              f"({read / 1e6:.1f} MB checked)")
    if len(rows) > 1:
        (n0, _, p0, i0, _), (n1, _, p1, i1, _) = rows[0], rows[-1]
        print(f"{n1 / n0:.0f}x the files: plain {p1 / p0:.0f}x the time, index {i1 / i0:.1f}x")


if __name__ == "__main__":
    main()
