"""docs/rules.md is the rendering of the rules' metadata: an edit to a rule's text without rerunning
`python docs/generate_rules.py` fails here."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_rules_md_is_current():
    res = subprocess.run([sys.executable, os.path.join(ROOT, "docs", "generate_rules.py"), "--check"],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_rules_md_lists_every_code():
    from codemods.base import RULES
    import codemods.registry  # noqa: F401
    with open(os.path.join(ROOT, "docs", "rules.md"), encoding="utf-8") as fh:
        text = fh.read()
    for code in RULES:
        assert f"\n### {code}\n" in text, code
