"""README.md is assembled from docs/readme/ (`python docs/assemble_readme.py`): an edit made to one and
not the other would be lost at the next assembly."""
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_readme_is_the_assembly_of_its_sections(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("assemble_readme", os.path.join(ROOT, "docs", "assemble_readme.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    (tmp_path / "docs").mkdir()
    monkeypatch.setattr(module, "HERE", str(tmp_path / "docs"))
    os.symlink(os.path.join(ROOT, "docs", "readme"), tmp_path / "docs" / "readme")
    module.main()
    with open(tmp_path / "README.md", encoding="utf-8") as fh:
        assembled = fh.read()
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as fh:
        assert fh.read() == assembled, "README.md differs from docs/readme/: edit the section, then run " \
                                       "python docs/assemble_readme.py"
