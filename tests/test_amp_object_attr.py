"""apex amp stored on an object (codemods/amp_object_attr.py): migrated across modules only when the
whole run proves the handle; any other read of the attribute, a `.scaler` attribute elsewhere, a second
setter or a class that uses the handle in another shape leave every file byte-identical with the
findings that say what to do (A2A124 at the initialize, A2A125 at the scaled backward)."""
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEGACY = os.path.join(HERE, "fixtures", "runnable", "amp_on_object", "legacy")

EXTRA = {
    "handle_read_elsewhere": ("report.py", "def report(model):\n    return model.amp is not None\n"),
    "scaler_attr_elsewhere": ("report.py", "def report(trainer):\n    return trainer.scaler.get_scale()\n"),
    "second_setter": ("other_utils.py", "def initialize_amp2(model):\n    from apex import amp\n"
                                       "    model.nn_module, model.optimizer = amp.initialize(model.nn_module, "
                                       "model.optimizer, opt_level='O1')\n    model.amp = amp\n"),
    "getattr_by_name": ("report.py", "def report(model):\n    return getattr(model, 'amp', None)\n"),
}


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "migrate", *args, "--no-cache"], capture_output=True, text=True)


def _snapshot(root):
    out = {}
    for folder, _, names in os.walk(root):
        for n in names:
            if n.endswith(".py"):
                p = os.path.join(folder, n)
                with open(p, "rb") as fh:
                    out[os.path.relpath(p, root)] = fh.read()
    return out


@pytest.mark.parametrize("case", sorted(EXTRA))
def test_unproven_handle_is_reported_and_left(tmp_path, case):
    shutil.copytree(LEGACY, tmp_path, dirs_exist_ok=True)
    rel, text = EXTRA[case]
    (tmp_path / rel).write_text(text)
    before = _snapshot(tmp_path)
    res = _cli("rewrite", str(tmp_path))
    assert "A2A181" not in res.stdout, res.stdout
    assert "src/models.py:22:22: A2A125" in res.stdout, res.stdout
    assert "A2A124" in res.stdout and "src/utils.py" in res.stdout, res.stdout
    after = _snapshot(tmp_path)
    for name in ("src/models.py", "src/utils.py"):
        assert after[name] == before[name], name


def test_class_using_the_handle_otherwise_is_left(tmp_path):
    shutil.copytree(LEGACY, tmp_path, dirs_exist_ok=True)
    models = tmp_path / "src" / "models.py"
    models.write_text(models.read_text().replace("        return {'loss': loss.item()}",
                                                 "        return {'loss': loss.item(), 'amp': self.amp}"))
    before = _snapshot(tmp_path)
    res = _cli("rewrite", str(tmp_path))
    assert "A2A181" not in res.stdout and "A2A125" in res.stdout, res.stdout
    after = _snapshot(tmp_path)
    assert after["src/models.py"] == before["src/models.py"] and after["src/utils.py"] == before["src/utils.py"]


def test_check_lists_the_migration_across_both_modules(tmp_path):
    shutil.copytree(LEGACY, tmp_path, dirs_exist_ok=True)
    res = _cli("check", str(tmp_path))
    lines = res.stdout.splitlines()
    assert any("src/utils.py:20:5: A2A181 [*]" in ln for ln in lines), res.stdout
    assert any("src/models.py:10:9: A2A181 [*]" in ln for ln in lines), res.stdout
    assert any("src/models.py:18:13: A2A104 [*]" in ln for ln in lines), res.stdout
