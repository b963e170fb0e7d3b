"""`[tool.apex2amp]` in pyproject.toml: found by walking up, validated, overridden by flags."""
from __future__ import annotations

import json
import textwrap

import pytest

from migrate.config import ConfigError, load_config

from test_cli_helpers import cli

LEGACY = "from torch.cuda.amp import GradScaler\nscaler = GradScaler()\n"


def project(tmp_path, table: str, files=None):
    (tmp_path / ".git").mkdir()  # the walk stops at the repository top
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent(table))
    for name, text in (files or {"pkg/train.py": LEGACY}).items():
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp_path


def codes(result):
    doc = json.loads(result.stdout)
    return {(f["path"], x["code"]) for f in doc["files"] for x in f["findings"]}


def test_ignore_from_config_and_flag_override(tmp_path):
    root = project(tmp_path, '[tool.apex2amp]\nignore = ["A2A15"]\n')
    r = cli(["check", "--format", "json", "."], cwd=root / "pkg")  # config found by walking up
    assert r.returncode == 0 and codes(r) == set()
    over = cli(["check", "--format", "json", "--ignore", "A2A7", "."], cwd=root / "pkg")  # any real code overrides the file
    assert over.returncode == 1 and ("train.py", "A2A151") in codes(over)


def test_select_and_per_file_ignores_and_exclude(tmp_path):
    root = project(tmp_path, """
        [project]
        name = "legacy"

        [tool.apex2amp]
        select = ["A2A1"]
        exclude = ["vendored/"]

        [tool.apex2amp.per-file-ignores]
        "pkg/old_*.py" = ["A2A15"]
        "conftest.py" = ["A2A15"]
        """, {"pkg/train.py": LEGACY, "pkg/old_train.py": LEGACY, "tests/conftest.py": LEGACY,
              "vendored/lib.py": LEGACY})
    r = cli(["check", "--format", "json", "."], cwd=root)
    found = codes(r)
    assert ("pkg/train.py", "A2A151") in found
    assert not any(p.startswith(("pkg/old_", "tests/", "vendored/")) for p, _ in found), found
    # per-file-ignores are anchored at the pyproject folder, also when a file is named alone (pre-commit)
    alone = cli(["check", "old_train.py"], cwd=root / "pkg")
    assert alone.returncode == 0, alone.stdout
    sel = cli(["check", "--format", "json", "--select", "A2A4", "."], cwd=root)
    assert codes(sel) == set()


def test_dtype_and_min_torch_from_config(tmp_path):
    root = project(tmp_path, '[tool.apex2amp]\nmin-torch = "2.2"\ndtype = "bfloat16"\n')
    r = cli(["rewrite", "pkg"], cwd=root)
    assert r.returncode in (0, 1)
    assert "torch.amp.GradScaler" not in (root / "pkg" / "train.py").read_text()  # below 2.3 keeps the old name
    (root / "pkg" / "train.py").write_text(LEGACY)
    r = cli(["rewrite", "--min-torch", "2.4", "pkg"], cwd=root)  # the flag wins
    assert r.returncode == 1
    assert 'GradScaler("cuda")' in (root / "pkg" / "train.py").read_text()


@pytest.mark.parametrize("table,needle", [
    ('[tool.apex2amp]\nselectt = ["A2A1"]\n', "unknown key 'selectt'"),
    ('[tool.apex2amp]\ndtype = "float8"\n', "dtype"),
    ('[tool.apex2amp]\nmin-torch = 2.1\n', "min-torch must be a quoted version"),
    ('[tool.apex2amp]\nmin-torch = "1.2"\n', "too old"),
    ('[tool.apex2amp]\nignore = "A2A1", \n', "invalid TOML"),
    ('[tool.apex2amp]\nper-file-ignores = ["x"]\n', "per-file-ignores"),
    ('[tool.apex2amp]\nexclude = [1]\n', "exclude"),
])
def test_bad_config_exits_two_naming_the_problem(tmp_path, table, needle):
    root = project(tmp_path, table)
    r = cli(["check", "."], cwd=root)
    assert r.returncode == 2
    assert needle in r.stderr and "pyproject.toml" in r.stderr, r.stderr


def test_explicit_config_and_closest_table_wins(tmp_path):
    root = project(tmp_path, '[tool.apex2amp]\nignore = ["A2A15"]\n')
    (root / "pkg" / "pyproject.toml").write_text('[project]\nname = "inner"\n')  # no table: keep walking
    assert load_config([str(root / "pkg" / "train.py")])["ignore"] == ["A2A15"]
    other = tmp_path / "other.toml"
    other.write_text('[tool.apex2amp]\nselect = ["A2A4"]\n')
    r = cli(["check", "--config", str(other), "."], cwd=root / "pkg")
    assert r.returncode == 0
    with pytest.raises(ConfigError):
        load_config(["."], str(tmp_path / "nope.toml"))
