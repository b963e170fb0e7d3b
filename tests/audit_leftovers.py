"""Audit (not a test: no pytest collection, no network): does every apex or hand-made fp16 site that a
rewrite leaves behind carry a finding at its line? (issue 21: "every file holding an apex or hand-made
fp16 construct ends migrated or with a finding at each remaining site").

    python tests/audit_leftovers.py [TREE ...] [--json OUT.json]

Without TREE, audits every fixture folder under fixtures/ (the legacy side only: `*.before.py` and
`*.unchanged.py` renamed to `<case>.py`, `legacy/` and `before/` trees; never `*.after.py`, `migrated/`
or `after/`). Each tree is copied to a temporary folder; there `apex2amp check --format json` runs on the
original, then `apex2amp rewrite`, then `check --format json` again on the rewritten copy. A site is a
line of the rewritten copy whose code (not its comments or strings) names `apex`, `scale_loss`, a
`loss_scale` name or calls `.half()`; it is silent when neither check has a finding at that line (the
first check's findings count at their `new_line`). Prints each silent site (tree, file, line, the
token, the line's code) and exits 1 when there is one. Golden files of one concern folder are
audited together as modules of one folder, so a few may see each other's facts.
"""
from __future__ import annotations

import argparse
import difflib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tokenize
from typing import Dict, Iterator, List, Optional, Set, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "fixtures")
_SKIP_DIRS = {"migrated", "after", "__pycache__", ".apex2amp_cache"}
# hand-broken migrations (the harness's negative cases) and the apex stand-in are no legacy code
_NOT_LEGACY = {"broken", "_apex_stub"}
_SITE_NAMES = {"apex", "scale_loss"}


def fixture_trees() -> List[str]:
    """Every folder under fixtures/ that holds legacy Python (a concern folder, a runnable case)."""
    out = []
    for folder, dirs, names in os.walk(FIXTURES):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS | _NOT_LEGACY)
        if any(n.endswith((".before.py", ".unchanged.py")) for n in names):
            out.append(folder)
        elif os.path.basename(folder) in ("legacy", "before"):
            out.append(folder)
            dirs[:] = []
        elif folder != FIXTURES and any(n.endswith(".py") for n in names) and \
                not any(os.path.isdir(os.path.join(folder, d)) for d in ("legacy", "before", "migrated")):
            out.append(folder)  # a small tree such as ecosystem/legacy_repo
            dirs[:] = []
    return out


def copy_legacy(src: str, dst: str) -> None:
    """`src` into `dst`: golden pairs by their case names, whole trees as they are, no after side."""
    for folder, dirs, names in os.walk(src):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        for name in names:
            if name.endswith(".after.py"):
                continue
            target_name = name
            for suffix in (".before.py", ".unchanged.py"):
                if name.endswith(suffix):
                    target_name = name[: -len(suffix)] + ".py"
            rel = os.path.relpath(os.path.join(folder, target_name), src)
            os.makedirs(os.path.dirname(os.path.join(dst, rel)), exist_ok=True)
            shutil.copyfile(os.path.join(folder, name), os.path.join(dst, rel))


def _cli(cwd: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT, APEX2AMP_CACHE_DIR=cwd + ".cache")
    return subprocess.run([sys.executable, "-m", "migrate", *args], cwd=cwd, capture_output=True, text=True,
                          env=env)


def _finding_lines(report: dict, key: str) -> Dict[str, Set[int]]:
    out: Dict[str, Set[int]] = {}
    for fr in report.get("files", []):
        for f in fr["findings"]:
            line = f.get(key) or f.get("line")
            if line:
                out.setdefault(fr["path"], set()).add(int(line))
    return out


def _check(cwd: str) -> dict:
    res = _cli(cwd, "check", "--format", "json", "--show-ignored", ".")
    if res.returncode == 2 and not res.stdout.startswith("{"):
        res = _cli(cwd, "check", "--format", "json", ".")
    try:
        return json.loads(res.stdout)
    except ValueError:
        raise SystemExit(f"check failed in {cwd}: {res.stdout[-2000:]}{res.stderr[-2000:]}")


def sites(text: str) -> Iterator[Tuple[int, str]]:
    """(line, token) of each site in Python source: a name `apex`/`scale_loss`, a name holding
    `loss_scale`, or `.half(`."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return
    seen: Set[int] = set()
    for i, tok in enumerate(tokens):
        if tok.type != tokenize.NAME:
            continue
        name = tok.string
        hit: Optional[str] = None
        after = tokens[i + 1].string if i + 1 < len(tokens) else ""
        k = i - 1
        while k >= 0 and tokens[k].type in (tokenize.NL, tokenize.COMMENT):
            k -= 1
        before = tokens[k].string if k >= 0 else ""
        if after == "=" and before in ("(", ","):
            continue  # a keyword argument's name (`dict(apex=...)`)
        if name in _SITE_NAMES or ("loss_scale" in name and "loss_scaler" not in name):
            hit = name
        elif name == "half" and i > 0 and tokens[i - 1].string == "." and i + 1 < len(tokens) \
                and tokens[i + 1].string == "(":
            hit = ".half()"
        if hit and tok.start[0] not in seen:
            seen.add(tok.start[0])
            yield tok.start[0], hit


def audit_tree(src: str, label: str) -> List[Dict[str, object]]:
    """The silent sites of one tree after its rewrite."""
    work = tempfile.mkdtemp(prefix="a2a-audit-")
    try:
        tree = os.path.join(work, "tree")
        copy_legacy(src, tree)
        originals = _texts(tree)
        before = _check(tree)
        errors = {fr["path"] for fr in before.get("files", []) if fr.get("error")}
        covered = _finding_lines(before, "new_line")
        _cli(tree, "rewrite", ".")
        after = _check(tree)
        for path, lines in _finding_lines(after, "line").items():
            covered.setdefault(path, set()).update(lines)
        silent = []
        for folder, dirs, names in os.walk(tree):
            dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
            for name in sorted(names):
                if not name.endswith(".py"):
                    continue
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, tree).replace(os.sep, "/")
                if rel in errors:
                    continue
                with open(path, encoding="utf-8", errors="replace") as fh:
                    text = fh.read()
                lines = text.splitlines()
                kept = _kept_lines(originals.get(rel, ""), text)
                spans = _statement_spans(text)
                have = covered.get(rel, set())
                for line, token in sites(text):
                    first, last = spans.get(line, (line, line))
                    if line in kept and not any(first <= f <= last for f in have):
                        silent.append({"tree": label, "file": rel, "line": line, "token": token,
                                       "code": lines[line - 1].strip()[:120]})
        return silent
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(os.path.join(work, "tree") + ".cache", ignore_errors=True)


def _texts(tree: str) -> Dict[str, str]:
    out = {}
    for folder, dirs, names in os.walk(tree):
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8", errors="replace") as fh:
                    out[os.path.relpath(path, tree).replace(os.sep, "/")] = fh.read()
    return out


def _statement_spans(text: str) -> Dict[int, Tuple[int, int]]:
    """line -> (first, last) line of the statement (a compound one's header) it belongs to: a finding
    on any line of a multi-line statement covers the statement's other lines."""
    import ast
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return {}
    out: Dict[int, Tuple[int, int]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt):
            continue
        body = getattr(node, "body", None)
        last = (body[0].lineno - 1) if isinstance(body, list) and body else (node.end_lineno or node.lineno)
        last = max(last, node.lineno)
        for line in range(node.lineno, last + 1):
            span = out.get(line)
            if span is None or span[1] - span[0] > last - node.lineno:
                out[line] = (node.lineno, last)
    return out


def _kept_lines(old: str, new: str) -> Set[int]:
    """The lines of `new` (1-based) that the rewrite left as they were in `old`: only those can be
    leftovers (a changed or inserted line is the migration's own code)."""
    a, b = old.splitlines(), new.splitlines()
    kept: Set[int] = set()
    for _, j, n in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks():
        kept.update(range(j + 1, j + n + 1))
    return kept


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="*")
    parser.add_argument("--json", dest="json_out")
    args = parser.parse_args(argv)
    trees = [os.path.abspath(t) for t in args.trees] or fixture_trees()
    found: List[Dict[str, object]] = []
    for t in trees:
        label = os.path.relpath(t, FIXTURES) if t.startswith(FIXTURES) else t
        silent = audit_tree(t, label)
        print(f"{label}: {len(silent)} silent site(s)", file=sys.stderr)
        found.extend(silent)
    for s in found:
        print(f"{s['tree']}: {s['file']}:{s['line']}: [{s['token']}] {s['code']}")
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as fh:
            json.dump(found, fh, indent=1)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
