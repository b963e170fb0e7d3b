"""A project's own copy of apex's loss scaler classes (a vendored loss_scaler.py) gets, at each of its report-only
findings (A2A511 / A2A512 / A2A146), who in the run still imports it (file:line), that it is unused and can be
deleted, or that a package loads modules dynamically; a training script with its own scaler class is not a copy.
Through the CLI (migrate/vendored_users.py, called by the engine after pass 2)."""
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCALER = os.path.join(HERE, "fixtures", "manual_scaling", "scaler_class.unchanged.py")
OWN = os.path.join(HERE, "fixtures", "dynamic_scaler", "positional_counter.unchanged.py")
DEMO = '\n\nif __name__ == "__main__":\n    print(DynamicLossScaler().loss_scale)\n'


def _findings(tree):
    res = subprocess.run([sys.executable, "-m", "migrate", "check", "--format", "json", "--no-cache", str(tree)],
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": HERE})
    assert res.returncode in (0, 1), res.stdout + res.stderr
    return {os.path.relpath(r["path"], str(tree)): r["findings"] for r in json.loads(res.stdout)["files"]}


def _copy(dst):
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with open(SCALER, encoding="utf-8") as fh:
        text = fh.read()
    with open(dst, "w", encoding="utf-8") as fh:
        fh.write(text + DEMO)


def _open(findings):
    return [f for f in findings if f["code"] in ("A2A511", "A2A512", "A2A146") and not f["fixed"]]


def test_an_imported_copy_names_its_importers(tmp_path):
    _copy(tmp_path / "loss_scaler.py")
    (tmp_path / "train.py").write_text("import torch\n\nfrom loss_scaler import DynamicLossScaler\n\n"
                                       "scaler = DynamicLossScaler()\n", encoding="utf-8")
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "bench.py").write_text("import loss_scaler\n", encoding="utf-8")
    found = _open(_findings(tmp_path)["loss_scaler.py"])
    assert found and all("Still imported by tools/bench.py:1, train.py:3" in f["message"] for f in found), found


def test_a_copy_no_file_imports_can_be_deleted_and_a_scripts_own_scaler_is_not_a_copy(tmp_path):
    _copy(tmp_path / "loss_scaler.py")
    shutil.copy(OWN, tmp_path / "train_own.py")
    out = _findings(tmp_path)
    found = _open(out["loss_scaler.py"])
    assert found and all("it is unused and can be deleted" in f["message"] for f in found), found
    own = _open(out["train_own.py"])
    assert own and not any("imported" in f["message"] or "deleted" in f["message"] for f in own), own


def test_an_importer_that_is_itself_an_unused_copy_says_so(tmp_path):
    _copy(tmp_path / "loss_scaler.py")
    _copy(tmp_path / "fp16_optimizer.py")
    with open(tmp_path / "fp16_optimizer.py", "a", encoding="utf-8") as fh:
        fh.write("\nfrom loss_scaler import DynamicLossScaler as Base  # noqa\n")
    out = _findings(tmp_path)
    assert all("Still imported by fp16_optimizer.py:" in f["message"] and "(itself an unused copy)" in f["message"]
               for f in _open(out["loss_scaler.py"]))


def test_a_package_loading_modules_by_name_keeps_its_copies(tmp_path):
    pkg = tmp_path / "optim"
    _copy(pkg / "loss_scaler.py")
    (pkg / "__init__.py").write_text("import importlib\nimport os\n\nfor f in os.listdir(os.path.dirname(__file__)):\n"
                                     "    importlib.import_module('optim.' + f[:-3])\n", encoding="utf-8")
    found = _open(_findings(tmp_path)[os.path.join("optim", "loss_scaler.py")])
    assert found and all("may still be loaded dynamically (optim/__init__.py" in f["message"] for f in found), found
    assert not any("can be deleted" in f["message"] and "check before" not in f["message"] for f in found)


def test_a_package_import_counts_only_when_its_init_imports_the_copy(tmp_path):
    pkg = tmp_path / "fp16"
    _copy(pkg / "loss_scaler.py")
    (pkg / "__init__.py").write_text("from .loss_scaler import *\n", encoding="utf-8")
    other = tmp_path / "utils"
    _copy(other / "loss_scaler.py")
    (other / "__init__.py").write_text("from .logging import log\n", encoding="utf-8")
    (other / "logging.py").write_text("def log(x):\n    print(x)\n", encoding="utf-8")
    (tmp_path / "train.py").write_text("from fp16 import DynamicLossScaler\nfrom utils import log\n", encoding="utf-8")
    out = _findings(tmp_path)
    assert all("Still imported by train.py:1:" in f["message"] for f in _open(out[os.path.join("fp16", "loss_scaler.py")]))
    assert all("it is unused and can be deleted" in f["message"]
               for f in _open(out[os.path.join("utils", "loss_scaler.py")]))
