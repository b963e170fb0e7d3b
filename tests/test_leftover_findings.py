"""Whatever apex use survives a rewrite is reported on its own line (never silently left behind)."""
import ast
import glob
import os

import pytest

from migrate import rewrite_source

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = sorted(glob.glob(os.path.join(ROOT, "fixtures", "*", "*.before.py"))
               + glob.glob(os.path.join(ROOT, "fixtures", "*", "*.unchanged.py"))
               + glob.glob(os.path.join(ROOT, "fixtures", "runnable*", "*", "legacy", "*.py"))
               + glob.glob(os.path.join(ROOT, "fixtures", "demo", "*.py")))


def _apex_use_lines(text):
    tree = ast.parse(text)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "apex":
                    names.add(a.asname or a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "apex" and not node.level:
            for a in node.names:
                if a.name != "*":
                    names.add(a.asname or a.name)
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in names:
            lines.add(node.lineno)
    return lines


@pytest.mark.parametrize("path", FILES, ids=[os.path.relpath(p, ROOT) for p in FILES])
def test_remaining_apex_uses_have_findings(path):
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    res = rewrite_source(text, path=path)
    assert res.error is None, res.error
    ast.parse(res.new_text)
    open_lines = {f.new_line or f.line for f in res.findings if not f.fixed}
    for line in _apex_use_lines(res.new_text):
        assert line in open_lines, f"apex still used at line {line} without a finding:\n{res.new_text}"


def test_region_not_found_names_the_model_it_looked_for():
    import golden
    from migrate.engine import Selection, rewrite_source
    case = next(c for c in golden.collect() if c.name == "forward_under_unknown_name")
    res = rewrite_source(case.before, path="m.py", module_name="m", select=Selection())
    [msg] = [f.message for f in res.findings if f.code == "A2A116"]
    assert msg.startswith("no call of `model` (the model `amp.initialize` returned)"), msg
    assert "under another name" in msg
