"""An apex import nothing in its module reads, but another file imports from that module, stays.

`pkg/__init__.py` re-exporting `FusedAdam`, or `modeling.py` binding `BertLayerNorm` for its
siblings: removing the import breaks `from pkg import FusedAdam` with an ImportError at run time.
Real runs of the CLI on temporary trees with a stand-in `apex` package, then the migrated code imported.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from migrate import reexports
from migrate.reexports import imported_names

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FAKE_APEX = {
    "apex/__init__.py": "",
    "apex/optimizers/__init__.py": "class FusedAdam:\n    def __init__(self, params, lr=1e-3):\n        self.lr = lr\n",
    "apex/normalization/__init__.py": "class FusedLayerNorm:\n    def __init__(self, n, eps=1e-5):\n        self.n = n\n",
}


def _tree(base, files):
    for rel, text in files.items():
        path = base / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "migrate", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": ROOT})


def _imports_cleanly(project, module, apex_dir):
    return subprocess.run([sys.executable, "-c", f"import {module}"], cwd=project, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": f"{project}{os.pathsep}{apex_dir}"})


def test_package_reexport_of_apex_names_stays(tmp_path):
    project, apex_dir = tmp_path / "proj", tmp_path / "site"
    _tree(apex_dir, FAKE_APEX)
    _tree(project, {
        "pkg/__init__.py": "from apex.optimizers import FusedAdam\n"
                           "from apex.normalization import FusedLayerNorm as LayerNorm\n",
        "user.py": "from pkg import FusedAdam, LayerNorm\n\nopt = FusedAdam([], lr=1e-3)\nnorm = LayerNorm(3)\n",
    })
    out = _cli("rewrite", str(project))
    assert out.returncode in (0, 1), out.stdout + out.stderr
    assert "from apex.optimizers import FusedAdam" in (project / "pkg/__init__.py").read_text()
    assert "A2A118" in out.stdout and "user.py" in out.stdout
    ran = _imports_cleanly(project, "user", apex_dir)
    assert ran.returncode == 0, ran.stderr


def test_module_alias_imported_by_a_sibling_stays_even_when_only_the_module_is_staged(tmp_path):
    """pre-commit passes only the staged file: the importer outside the run is read from disk."""
    project, apex_dir = tmp_path / "proj", tmp_path / "site"
    _tree(apex_dir, FAKE_APEX)
    _tree(project, {
        "pkg/__init__.py": "",
        "pkg/modeling.py": "from apex.normalization import FusedLayerNorm as BertLayerNorm\n\n\n"
                           "def embeddings(h):\n    return BertLayerNorm(h, eps=1e-12)\n",
        "pkg/heads.py": "from .modeling import BertLayerNorm\n\n\ndef head(h):\n    return BertLayerNorm(h)\n",
    })
    out = _cli("rewrite", str(project / "pkg" / "modeling.py"))
    assert out.returncode in (0, 1), out.stdout + out.stderr
    text = (project / "pkg/modeling.py").read_text()
    assert "nn.LayerNorm(h, eps=1e-12)" in text  # the construction is still migrated
    assert "from apex.normalization import FusedLayerNorm as BertLayerNorm" in text
    assert "heads.py" in out.stdout
    ran = _imports_cleanly(project, "pkg.heads", apex_dir)
    assert ran.returncode == 0, ran.stderr


def test_unused_apex_import_nobody_imports_still_goes(tmp_path):
    _tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/modeling.py": "from apex.normalization import FusedLayerNorm as BertLayerNorm\n\n\n"
                           "def embeddings(h):\n    return BertLayerNorm(h, eps=1e-12)\n",
        "pkg/heads.py": "import pkg.modeling as m\n\n\ndef head(args):\n    return args.BertLayerNorm\n",
        "pkg/local.py": "def f():\n    from apex.normalization import FusedLayerNorm\n    return FusedLayerNorm(3)\n",
        "use_local.py": "from pkg.local import FusedLayerNorm\n",  # not importable: local.py binds it in f only
    })
    out = _cli("rewrite", "--diff", str(tmp_path))
    assert "-from apex.normalization import FusedLayerNorm as BertLayerNorm" in out.stdout
    assert "-    from apex.normalization import FusedLayerNorm" in out.stdout
    assert "is imported from this module" not in out.stdout


def test_rerun_from_the_cache_keeps_the_reexport(tmp_path):
    project = tmp_path / "proj"
    _tree(project, {"pkg/__init__.py": "from apex.optimizers import FusedAdam\n",
                    "user.py": "from pkg import FusedAdam\n"})
    cache = str(tmp_path / "cache")
    first = _cli("check", "--cache-dir", cache, str(project))
    second = _cli("check", "--cache-dir", cache, str(project))
    assert "is imported from this module" in first.stdout
    assert first.stdout == second.stdout


SPELLINGS = [
    ("user.py", "from pkg.modeling import BertLayerNorm, gelu\n", {"BertLayerNorm"}),
    ("pkg/heads.py", "from .modeling import (\n    BertLayerNorm,\n    gelu,\n)\n", {"BertLayerNorm"}),
    ("pkg/sub/x.py", "from ..modeling import BertLayerNorm as LN\n", {"BertLayerNorm"}),
    ("user.py", "import pkg.modeling as m\nnorm = m.BertLayerNorm(3)\n", {"BertLayerNorm"}),
    ("user.py", "import pkg.modeling\nnorm = pkg.modeling.BertLayerNorm(3)\n", {"BertLayerNorm"}),
    ("user.py", "from pkg.modeling import *\n", {"BertLayerNorm", "amp"}),
    ("user.py", "import pkg.modeling\nx = args.BertLayerNorm\n", set()),
    ("user.py", "from other.modeling import BertLayerNorm\n", set()),
    ("user.py", "from pkg import modeling\n", set()),
]


@pytest.mark.parametrize("path,text,found", SPELLINGS)
def test_imported_names_reads_each_import_spelling(tmp_path, path, text, found):
    _tree(tmp_path, {"pkg/__init__.py": "", "pkg/sub/__init__.py": "", path: text})
    got = imported_names(str(tmp_path / path), text.encode(), "pkg.modeling", {"BertLayerNorm", "amp"})
    assert got == found


@pytest.mark.parametrize("path,text,found", SPELLINGS)
def test_a_run_that_dropped_imports_in_many_modules_finds_the_same_importers(tmp_path, path, text, found):
    """Past a few modules, files are screened by their import lines' words instead of one search per
    module: the importers found must not change."""
    _tree(tmp_path, {"pkg/__init__.py": "", "pkg/sub/__init__.py": "", path: text})
    root = str(tmp_path)
    dropped = {f"{root}::pkg.modeling": ["BertLayerNorm", "amp"]}
    for few in (True, False):
        extra = 0 if few else reexports._FEW_TAILS + 4
        many = {**dropped, **{f"{root}::pkg.unrelated{k}": ["FusedAdam"] for k in range(extra)}}
        hits = reexports._scan([(str(tmp_path / path), text.encode())], many, {})
        assert {name for key, name, _ in hits if key.endswith("pkg.modeling")} == found
