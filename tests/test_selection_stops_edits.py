"""`--select/--ignore` and `[tool.apex2amp]` select/ignore decide which edits are made, not only which
findings are shown; an unknown selector is a usage error; a deselected rule's sites are not reported
as "migrate this use by hand" (A2A118)."""
from __future__ import annotations

import os
import shutil

import pytest

from migrate.engine import Selection, rewrite_source

from test_cli_helpers import FINDING_RX, REPO, cli

FIXTURES = os.path.join(REPO, "fixtures", "selection")


def _copy(tmp_path, *names):
    (tmp_path / ".git").mkdir()
    for n in names:
        shutil.copy(os.path.join(FIXTURES, n), tmp_path / n)
    return tmp_path


def _codes(out: str):
    return {(m["path"], m["code"]) for m in (FINDING_RX.match(line) for line in out.splitlines()) if m}


def _same(tmp_path, name) -> bool:
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as fh:
        return (tmp_path / name).read_text(encoding="utf-8") == fh.read()


def test_ignore_spawn_rule_keeps_mp_spawn_but_converts_local_rank(tmp_path):
    root = _copy(tmp_path, "spawn_worker.py")
    r = cli(["rewrite", "--no-cache", "--ignore", "A2A401", "spawn_worker.py"], cwd=str(root))
    text = (root / "spawn_worker.py").read_text()
    assert r.returncode == 1, r.stdout + r.stderr
    assert "mp.spawn(worker" in text and 'init_method="tcp://127.0.0.1:23456"' in text  # the spawn group stays
    assert '"--local-rank"' in text  # A2A408, still selected, is applied
    assert not {c for _, c in _codes(r.stdout)} & {"A2A401", "A2A402", "A2A404"}


def test_ignoring_part_of_the_spawn_migration_keeps_all_of_it(tmp_path):
    root = _copy(tmp_path, "spawn_worker.py")
    r = cli(["check", "--no-cache", "--ignore", "A2A402,A2A408", "spawn_worker.py"], cwd=str(root))
    assert ("spawn_worker.py", "A2A406") in _codes(r.stdout) and "A2A402" in r.stdout  # says why
    assert ("spawn_worker.py", "A2A401") not in _codes(r.stdout) and "would rewrite" not in r.stdout


def test_select_one_rule_applies_no_other_rules_edit(tmp_path):
    root = _copy(tmp_path, "local_rank_only.py")
    r = cli(["rewrite", "--no-cache", "--select", "A2A401", "local_rank_only.py"], cwd=str(root))
    assert r.returncode == 0 and _same(root, "local_rank_only.py"), r.stdout + r.stderr


def test_ignore_in_pyproject_stops_the_edit(tmp_path):
    root = _copy(tmp_path, "spawn_worker.py", "amp_with_apex_ddp.py")
    (root / "pyproject.toml").write_text('[tool.apex2amp]\nignore = ["A2A401", "A2A201"]\n')
    r = cli(["rewrite", "--no-cache", "."], cwd=str(root))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "mp.spawn(worker" in (root / "spawn_worker.py").read_text()
    ddp = (root / "amp_with_apex_ddp.py").read_text()
    assert "from apex.parallel import DistributedDataParallel as DDP" in ddp and "delay_allreduce=True" in ddp
    assert "scaler.scale(loss).backward()" in ddp  # amp, still selected, is migrated
    # DDP's own rule is deselected: its apex use is not "migrate this use by hand"
    assert ("amp_with_apex_ddp.py", "A2A118") not in _codes(r.stdout)


def test_narrow_selection_does_not_flood_leftover_warnings(tmp_path):
    root = _copy(tmp_path, "amp_with_apex_ddp.py")
    r = cli(["check", "--no-cache", "--select", "A2A2,A2A118", "amp_with_apex_ddp.py"], cwd=str(root))
    found = _codes(r.stdout)
    assert ("amp_with_apex_ddp.py", "A2A201") in found
    assert ("amp_with_apex_ddp.py", "A2A118") not in found, r.stdout


@pytest.mark.parametrize("args,pyproject,bad", [
    (["--select", "XYZ"], None, "XYZ"),
    (["--ignore", "A2A9"], None, "A2A9"),
    (["--select", "A2A1,a2a9"], None, "A2A9"),
    ([], '[tool.apex2amp]\nselect = ["A2A99"]\n', "A2A99"),
    ([], '[tool.apex2amp]\nextend-ignore = ["NOPE"]\n', "NOPE"),
])
def test_unknown_selector_is_a_usage_error(tmp_path, args, pyproject, bad):
    root = _copy(tmp_path, "local_rank_only.py")
    if pyproject:
        (root / "pyproject.toml").write_text(pyproject)
    r = cli(["check", "--no-cache", *args, "."], cwd=str(root))
    assert r.returncode == 2 and f"unknown rule selector: {bad}" in r.stderr, r.stdout + r.stderr


def test_known_prefixes_and_newer_codes_are_selectors(tmp_path):
    root = _copy(tmp_path, "local_rank_only.py")
    r = cli(["check", "--no-cache", "--select", "A2A7,a2a70,A2A704,A2A126,A2A509,A2A161,ALL", "--ignore", "A2A6",
             "."], cwd=str(root))
    assert r.returncode == 1 and "unknown rule selector" not in r.stderr, r.stdout + r.stderr


def test_engine_undoes_a_deselected_rules_edit():
    """A stage whose edit belongs to a deselected rule (here: removing an unused apex import, A2A110)
    leaves the text as it was."""
    with open(os.path.join(FIXTURES, "unused_apex_import.py"), encoding="utf-8") as fh:
        text = fh.read()
    assert rewrite_source(text, path="m.py").changed
    res = rewrite_source(text, path="m.py", select=Selection(ignore=["A2A110"]))
    assert res.new_text == text and not res.findings
