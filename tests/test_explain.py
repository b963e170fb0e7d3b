"""`apex2amp explain` and `apex2amp rules`: every code emitted anywhere is documented."""
from __future__ import annotations

import json
import os
import re

import pytest

from codemods.base import RULES, SEVERITIES

from test_cli_helpers import REPO, cli


def _sections(text: str):
    """Explanation blocks of `apex2amp explain A B ...` by code."""
    blocks = re.split(r"\n\n(?=A2A\d{3} \()", text.strip())
    return {b.split(" ", 1)[0]: b for b in blocks}


def _nonempty(block: str, title: str) -> str:
    m = re.search(rf"## {title}\n(.*?)(?=\n## |\Z)", block, re.S)
    assert m, f"no {title} section"
    body = m.group(1).replace("```python", "").replace("```", "").strip()
    assert body, f"empty {title} section"
    return body


def _emitted_codes(tmp_path):
    """Codes the CLI emits over fixtures/, scanned by two concurrent `check --format json` processes."""
    import subprocess
    import sys
    root = os.path.join(REPO, "fixtures")
    tops = sorted(os.path.join(root, d) for d in os.listdir(root))
    groups = [tops[0::2], tops[1::2]]
    env = dict(os.environ, PYTHONPATH=REPO)
    # migrated twins (*.after.py, migrated/) are the rewrite's own output: whatever they emit, their legacy
    # side emits too, so they are skipped to keep this fast
    procs = [subprocess.Popen([sys.executable, "-m", "migrate", "check", "--format", "json", "--show-ignored",
                               "--exclude", "*.after.py", "--exclude", "migrated", *g], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
             for g in groups if g]
    codes = set()
    for p in procs:
        out, _ = p.communicate(timeout=600)
        assert p.returncode in (0, 1, 2)
        doc = json.loads(out)
        codes |= {x["code"] for f in doc["files"] for x in f["findings"]}
    return sorted(codes)


@pytest.mark.slow
def test_every_emitted_code_has_an_explanation(tmp_path):
    emitted = _emitted_codes(tmp_path)
    assert emitted, "the fixtures must emit some codes"
    ex = cli(["explain", *emitted], cwd=tmp_path)
    assert ex.returncode == 0, ex.stderr
    blocks = _sections(ex.stdout)
    assert sorted(blocks) == emitted
    for code, block in blocks.items():
        assert re.search(r"^Severity: (fix|warning|info)$", block, re.M), code
        for title in ("Why", "Before", "After"):
            _nonempty(block, title)


def test_every_registered_rule_is_complete_and_listed(tmp_path):
    import codemods.registry  # noqa: F401
    for code, r in RULES.items():
        assert re.fullmatch(r"A2A[1-8]\d\d", code), code
        assert r.summary and r.why and r.before, code  # an empty `after` means "removed" (explain says so)
        assert r.severity in SEVERITIES
    listed = cli(["rules"], cwd=tmp_path)
    assert listed.returncode == 0
    codes = [ln.split()[0] for ln in listed.stdout.splitlines()]
    assert codes == sorted(RULES)
    everything = cli(["explain", "--all"], cwd=tmp_path)
    assert sorted(_sections(everything.stdout)) == sorted(RULES)


def test_explain_is_case_insensitive_and_rejects_unknown(tmp_path):
    code = sorted(RULES)[0]
    r = cli(["explain", code.lower()], cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.startswith(f"{code} (")
    assert f"# apex2amp: ignore[{code}]" in r.stdout
    bad = cli(["explain", code, "A2A000"], cwd=tmp_path)
    assert bad.returncode == 2 and "A2A000" in bad.stderr
