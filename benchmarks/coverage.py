"""Measure migration coverage on real trees: the share of legacy sites `rewrite` migrates.

    python benchmarks/coverage.py TREE [TREE ...] [--json OUT] [--unsafe-fixes]

A *site* is a line of a Python file that uses (not merely mentions, in a docstring or message) apex mixed precision (amp.initialize, amp.scale_loss,
amp.state_dict / load_state_dict, amp.master_params), apex.parallel, an apex fused module or optimizer,
FP16_Optimizer, mp.spawn / torch.multiprocessing.spawn, torch.distributed.launch, or hand-written loss
scaling (a loss scaler class or `loss * scale` before backward). Each tree is copied to a temporary folder and
rewritten there with the CLI (`apex2amp rewrite --format json`); a site is *migrated* when its pattern
occurs fewer times in the rewritten file, and a site left in place is *reported* when its file has an open
finding (not fixed) within two lines of
the site or on the first line of a class or function holding it. A remaining site without a finding is *silent*: the tool must never
leave one. Prints one row per tree and the total.

With `--unsafe-fixes` each tree is also rewritten a second time with `rewrite --unsafe-fixes` (fixes
that change numerics, A2A145) and the row adds what that run migrates and leaves silent; the default
run's figures stay the headline (the share column and the total).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from typing import Dict, List, Tuple

SITES: Dict[str, "re.Pattern[str]"] = {
    "amp": re.compile(r"\bamp\.(initialize|scale_loss|master_params|state_dict|load_state_dict)\b"),
    "apex-import": re.compile(r"^\s*(from\s+apex[\w.]*\s+import|import\s+apex)\b"),
    "apex-parallel": re.compile(r"\b(apex\.parallel|convert_syncbn_model)\b"),
    "apex-fused": re.compile(r"\b(FusedAdam|FusedLAMB|FusedSGD|FusedNovoGrad|FusedLayerNorm|FusedRMSNorm)\s*\("),
    "fp16-optimizer": re.compile(r"\bFP16_Optimizer\s*\("),
    "spawn": re.compile(r"\b(mp|multiprocessing)\.spawn\s*\("),
    "launch": re.compile(r"torch\.distributed\.launch\b"),
    "manual-scaling": re.compile(r"\b(DynamicLossScaler|LossScaler)\s*\(|\bloss\s*\*\s*[\w.]*scale\b"),
}


def _string_spans(text: str) -> List[Tuple[Tuple[int, int], Tuple[int, int]]]:
    """(start, end) positions, as tokenize gives them, of every string literal (docstrings, messages)."""
    import io
    import tokenize
    spans = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.STRING:
                spans.append((tok.start, tok.end))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return spans


_LOCAL_DEF = re.compile(r"^\s*(?:def|class)\s+(convert_syncbn_model|Fused\w+)\b", re.M)


def sites_of(text: str) -> List[Tuple[str, int]]:
    """(kind, 1-based line) of every site in a file's text. Comments do not count; nor do string
    literals (a docstring or log message naming apex), except for launch lines, which the tool also reads
    in strings (subprocess argument lists, usage texts); nor a call of a same-named function or class the
    file defines itself (a vendored `convert_syncbn_model`)."""
    found = []
    spans = _string_spans(text)
    local = set(_LOCAL_DEF.findall(text))
    for n, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0]
        if "apex2amp" in line:
            continue  # a helper the rewrite added names what it stands for (its docstring)
        for kind, pattern in SITES.items():
            m = pattern.search(code)
            if not m or (kind != "launch" and any(a <= (n, m.start()) < b for a, b in spans)):
                continue
            if kind in ("apex-parallel", "apex-fused") and m.group(1) in local and "apex" not in code:
                continue
            found.append((kind, n))
    return found


def enclosing_lines(text: str, line: int) -> set:
    """First lines of the classes and functions whose body holds `line` (a finding there covers it)."""
    import ast
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return set()
    return {n.lineno for n in ast.walk(tree)
            if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and n.lineno <= line <= (n.end_lineno or n.lineno)}


def measure(tree: str, unsafe_fixes: bool = False) -> Dict[str, object]:
    """Rewrite a copy of `tree` and count its sites: total, migrated, reported, silent (with examples).
    `unsafe_fixes`: the rewrite also applies the fixes that change numerics (`--unsafe-fixes`)."""
    work = tempfile.mkdtemp(prefix="a2a-coverage-")
    copy = os.path.join(work, os.path.basename(os.path.abspath(tree)))
    shutil.copytree(tree, copy, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    before: Dict[str, str] = {}
    for folder, _, names in os.walk(copy):
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                if sites_of(text):
                    before[os.path.relpath(os.path.realpath(path), os.path.realpath(work))] = text
    cmd = [sys.executable, "-m", "migrate", "rewrite", copy, "--format", "json", "--no-cache"]
    cmd += ["--unsafe-fixes"] if unsafe_fixes else []
    out = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
    report = json.loads(out.stdout or "{}")
    open_lines: Dict[str, set] = {}
    open_codes: Dict[Tuple[str, int], set] = {}
    for fr in report.get("files", []):
        rel = os.path.relpath(os.path.realpath(os.path.join(work, fr["path"])), os.path.realpath(work))
        for f in fr["findings"]:
            if not f["fixed"]:
                line = f.get("original_line") or f["line"]
                open_lines.setdefault(rel, set()).add(line)
                open_codes.setdefault((rel, line), set()).add(f["code"])
    totals = Counter()
    silent: List[str] = []
    reported_at: List[str] = []
    for rel, text in before.items():
        with open(os.path.join(work, rel), encoding="utf-8", errors="replace") as f:
            after_text = f.read()
        after_lines = after_text.splitlines()
        after = Counter((kind, after_lines[n - 1].strip()) for kind, n in sites_of(after_text))
        spare = Counter(kind for kind, _ in sites_of(after_text))  # sites left, by kind, not matched by text
        lines = text.splitlines()
        sites = sites_of(text)
        left_at = set()
        for kind, line in sites:  # a line kept as it was is a site left in place
            key = (kind, lines[line - 1].strip())
            if after[key] > 0:
                after[key] -= 1
                spare[kind] -= 1
                left_at.add((kind, line))
        for kind, line in sites:  # a rewritten line that still holds the pattern
            if (kind, line) not in left_at and spare[kind] > 0:
                spare[kind] -= 1
                left_at.add((kind, line))
        reported = open_lines.get(rel, set())
        for kind, line in sites:
            totals["sites"] += 1
            if (kind, line) not in left_at:
                totals["migrated"] += 1
            elif any(abs(line - r) <= 2 for r in reported) or enclosing_lines(text, line) & reported:
                totals["reported"] += 1
                near = [r for r in reported if abs(line - r) <= 2] or sorted(enclosing_lines(text, line) & reported)
                codes = sorted(set().union(*(open_codes.get((rel, r), set()) for r in near)))
                reported_at.append(f"{rel}:{line}: {kind} ({' '.join(codes)})")
            else:
                totals["silent"] += 1
                silent.append(f"{rel}:{line}: {kind}")
    shutil.rmtree(work, ignore_errors=True)
    return {"tree": tree, "exit": out.returncode, **totals, "silent_sites": silent, "reported_sites": reported_at}


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trees", nargs="+")
    ap.add_argument("--json", help="write the rows to this file")
    ap.add_argument("--list-reported", action="store_true", help="also list each reported site with its codes")
    ap.add_argument("--unsafe-fixes", action="store_true",
                    help="also count what a run with --unsafe-fixes migrates (the default run stays the headline)")
    args = ap.parse_args(argv)
    rows = []
    for t in args.trees:
        row = measure(t)
        if args.unsafe_fixes:
            unsafe = measure(t, unsafe_fixes=True)
            row["unsafe_fixes"] = {k: unsafe.get(k, 0) for k in ("migrated", "reported", "silent")}
            row["unsafe_fixes"]["silent_sites"] = unsafe["silent_sites"]
        rows.append(row)
    total = Counter()
    extra = f" {'+unsafe':>7} {'silent':>6}" if args.unsafe_fixes else ""
    print(f"{'tree':50} {'sites':>6} {'migr.':>6} {'share':>6} {'rep.':>5} {'silent':>6}{extra}")
    for r in rows:
        for k in ("sites", "migrated", "reported", "silent"):
            total[k] += r.get(k, 0)
        u = r.get("unsafe_fixes")
        if u:
            total["unsafe_migrated"] += u["migrated"]
            total["unsafe_silent"] += u["silent"]
        share = r.get("migrated", 0) / r["sites"] if r.get("sites") else 1.0
        print(f"{os.path.basename(r['tree'].rstrip('/')):50} {r.get('sites', 0):6} {r.get('migrated', 0):6} "
              f"{share:6.0%} {r.get('reported', 0):5} {r.get('silent', 0):6}"
              + (f" {u['migrated']:7} {u['silent']:6}" if u else ""))
        for s in r["silent_sites"][:10]:
            print("    silent:", s)
        for s in (u["silent_sites"][:10] if u else ()):
            print("    silent with --unsafe-fixes:", s)
        for s in r["reported_sites"] if args.list_reported else ():
            print("    reported:", s)
    if total["sites"]:
        print(f"{'total':50} {total['sites']:6} {total['migrated']:6} {total['migrated'] / total['sites']:6.0%} "
              f"{total['reported']:5} {total['silent']:6}"
              + (f" {total['unsafe_migrated']:7} {total['unsafe_silent']:6}" if args.unsafe_fixes else ""))
        if args.unsafe_fixes:
            print(f"with --unsafe-fixes: {total['unsafe_migrated']}/{total['sites']} migrated "
                  f"({total['unsafe_migrated'] / total['sites']:.0%}), {total['unsafe_silent']} silent")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
