"""Fuzz the rewriter with structural mutations of legacy files, by hand (not part of the suite).

    python tests/fuzz.py [--seconds 300] [--seed 0] [--out fuzz-failures] [TREE ...]

Seeds are the fixtures' legacy inputs plus every Python file under the TREEs that mentions apex (public
training code fetched locally). Each mutant drops, duplicates or swaps lines, wraps a run of lines in
`if` / `try` / `with` / `for`, gives an apex or launch call an extra, starred or keyword argument,
renames an identifier everywhere or re-indents with tabs or two spaces;
mutants that no longer parse are skipped. A mutant fails when `rewrite_source` raises or reports an
internal error (a codemod crash, an output that does not parse, a second rewrite that changes it
again), or, with pyflakes installed, when the rewrite reads a name nothing defines; failures are written to --out for a golden fixture to be made from them. The property test in
test_property.py runs a small version of this on every CI run.
"""
from __future__ import annotations

import argparse
import ast
import glob
import os
import random
import re
import sys
import time
from typing import List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from migrate.engine import Selection, rewrite_source  # noqa: E402

WRAPPERS = ["if flag:\n", "try:\n", "with ctx:\n", "for _ in range(2):\n"]


def seeds(trees: List[str]) -> List[Tuple[str, str]]:
    paths = glob.glob(os.path.join(os.path.dirname(HERE), "fixtures", "**", "*.before.py"), recursive=True)
    for tree in trees:
        for p in glob.glob(os.path.join(tree, "**", "*.py"), recursive=True):
            try:
                with open(p, encoding="utf-8", errors="ignore") as fh:
                    if "apex" in fh.read():
                        paths.append(p)
            except OSError:
                pass
    out = []
    for p in paths:
        try:
            with open(p, encoding="utf-8") as fh:
                text = fh.read()
            if len(text) < 200_000:
                ast.parse(text)
                out.append((p, text))
        except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
            pass
    return out


def mutate(text: str, rng: random.Random) -> str:
    lines = text.splitlines(keepends=True)
    for _ in range(rng.randint(1, 3)):
        if not lines:
            break
        op, i = rng.random(), rng.randrange(len(lines))
        if op < 0.25:
            del lines[i]
        elif op < 0.45:
            lines.insert(i, lines[rng.randrange(len(lines))])
        elif op < 0.55:
            j = rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        elif op < 0.75:  # a run of lines at one indentation goes into a new block
            indent = re.match(r"[ \t]*", lines[i]).group(0)  # type: ignore[union-attr]
            j = i
            while j < len(lines) and (lines[j].startswith(indent) or not lines[j].strip()) and j - i < 12:
                j += 1
            head = rng.choice(WRAPPERS)
            body = ["    " + line if line.strip() else line for line in lines[i:j]]
            tail = [indent + "except Exception:\n", indent + "    pass\n"] if head == "try:\n" else []
            lines[i:j] = [indent + head] + body + tail
        elif op < 0.8:  # an apex / launch call gets an extra, starred or keyword argument
            calls = [k for k, line in enumerate(lines) if re.search(r"(amp|DDP|spawn|Parallel|Optimizer|Fused\w*)\(", line)]
            if calls:
                k = rng.choice(calls)
                extra = rng.choice(["*extra", "**options", "flag", "enabled=False", "verbosity=0", "None"])
                lines[k] = re.sub(r"\(([^()]*)\)", lambda m: f"({m.group(1)}, {extra})" if m.group(1).strip()
                                  else f"({extra})", lines[k], count=1)
        elif op < 0.9:
            names = sorted(set(re.findall(r"\b[a-z_][a-z0-9_]{2,}\b", "".join(lines))))
            if names:
                name = rng.choice(names)
                lines = [re.sub(rf"\b{name}\b", name + "_x", line) for line in lines]
        else:
            unit = rng.choice(["\t", "  "])
            lines = [re.sub(r"^((?:    )+)", lambda m: unit * (len(m.group(1)) // 4), line) for line in lines]
    return "".join(lines)


def undefined_names(text: str) -> set:
    """Names pyflakes reports undefined in `text` (an empty set when pyflakes is not installed)."""
    try:
        from pyflakes import checker, messages
    except ImportError:
        return set()
    tree = ast.parse(text)
    found = checker.Checker(tree, filename="mutant.py").messages
    # a star import hides undefined names (ImportStarUsage); count them, since a rewrite may drop the star
    return {m.message_args[0] for m in found if isinstance(m, (messages.UndefinedName, messages.ImportStarUsage))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trees", nargs="*")
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="fuzz-failures")
    args = ap.parse_args()
    pool = seeds(args.trees)
    rng = random.Random(args.seed)
    deadline = time.time() + args.seconds
    tried = failed = 0
    while time.time() < deadline:
        origin, text = rng.choice(pool)
        mutant = mutate(text, rng)
        try:
            compile(mutant, "mutant.py", "exec")  # ast.parse alone lets `return` at module level through
        except (SyntaxError, ValueError):
            continue
        tried += 1
        try:
            res = rewrite_source(mutant, path="mutant.py", module_name="mutant", select=Selection())
            why = res.error if res.error and "internal error" in res.error else None
        except Exception as e:  # noqa: BLE001 - rewrite_source must never raise; record it
            why = f"raised {type(e).__name__}: {e}"
        if not why and res.changed:
            lost = undefined_names(res.new_text) - undefined_names(mutant)
            if lost:
                why = f"the rewrite reads names nothing defines: {sorted(lost)}"
        if why:
            failed += 1
            os.makedirs(args.out, exist_ok=True)
            path = os.path.join(args.out, f"failure_{failed}.py")
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(mutant)
            print(f"{path}: from {origin}: {why[:200]}", flush=True)
    print(f"{tried} mutants of {len(pool)} seeds, {failed} failure(s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
