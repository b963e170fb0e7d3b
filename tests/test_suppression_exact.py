"""`# apex2amp: ignore[CODE]` hides exactly the code it names: other names of the same import are still
migrated, `--show-ignored` lists every suppressed site, a file whose apex sites are all suppressed
passes `check` (exit 0), and only real comments count (tokenize), not text inside strings."""
from __future__ import annotations

import os
import shutil

from migrate.engine import rewrite_source

from test_cli_helpers import FINDING_RX, REPO, cli

FIXTURES = os.path.join(REPO, "fixtures", "suppression_exact")


def _copy(tmp_path, name):
    shutil.copy(os.path.join(FIXTURES, name), tmp_path / name)
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as fh:
        return fh.read()


def _ignored(out: str):
    return [(m["line"], m["code"]) for m in (FINDING_RX.match(ln[:-len(" (ignored)")])
                                              for ln in out.splitlines() if ln.endswith(" (ignored)")) if m]


def test_suppressing_one_name_still_migrates_the_other_names_of_its_import(tmp_path):
    old = _copy(tmp_path, "one_name_kept.py").splitlines()
    r = cli(["rewrite", "--no-cache", "one_name_kept.py"], cwd=str(tmp_path))
    assert r.returncode == 1, r.stdout + r.stderr
    new = (tmp_path / "one_name_kept.py").read_text().splitlines()
    assert new[1:3] == ["from torch.amp import autocast", "from torch.cuda.amp import GradScaler"]
    assert old[5] in new  # the suppressed GradScaler line is byte-identical
    assert '        with autocast("cuda"):' in new
    compile("\n".join(new), "one_name_kept.py", "exec")
    again = cli(["check", "--no-cache", "one_name_kept.py"], cwd=str(tmp_path))
    assert again.returncode == 0, again.stdout  # the kept name is suppressed, nothing else is left


def test_show_ignored_lists_the_suppressed_sites(tmp_path):
    _copy(tmp_path, "one_name_kept.py")
    r = cli(["check", "--no-cache", "--show-ignored", "one_name_kept.py"], cwd=str(tmp_path))
    assert ("6", "A2A151") in _ignored(r.stdout), r.stdout
    assert ", 1 ignored;" in r.stdout.splitlines()[-1]
    plain = cli(["check", "--no-cache", "one_name_kept.py"], cwd=str(tmp_path))
    assert "(ignored)" not in plain.stdout


def test_apex_sites_kept_by_comments_pass_check(tmp_path):
    text = _copy(tmp_path, "apex_kept_on_purpose.py")
    r = cli(["check", "--no-cache", "apex_kept_on_purpose.py"], cwd=str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr  # a pre-commit hook goes green
    w = cli(["rewrite", "--no-cache", "apex_kept_on_purpose.py"], cwd=str(tmp_path))
    assert w.returncode == 0 and (tmp_path / "apex_kept_on_purpose.py").read_text() == text
    shown = cli(["check", "--no-cache", "--show-ignored", "apex_kept_on_purpose.py"], cwd=str(tmp_path))
    assert ("7", "A2A101") in _ignored(shown.stdout), shown.stdout


def test_a_suppression_inside_a_string_is_no_comment():
    with open(os.path.join(FIXTURES, "comment_in_string.py"), encoding="utf-8") as fh:
        text = fh.read()
    res = rewrite_source(text, path="comment_in_string.py")
    assert 'scaler = GradScaler("cuda")' in res.new_text and 'other = GradScaler("cuda")' in res.new_text
    assert not any(f.ignored for f in res.findings)
