"""An apex O2 original against its fp32 + autocast migration: verify switches to the fidelity tolerance
(the weights are fp32 by design, A2A108) and says so; an O1 original keeps the same-engine tolerance."""
import json
import os

import pytest

pytest.importorskip("torch")

from verify_cli import verify_cli  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FX = os.path.join(ROOT, "fixtures", "runnable", "trainer_class")


def test_o2_original_is_compared_with_fidelity_tolerance(tmp_path):
    out = tmp_path / "v.json"
    r = verify_cli(os.path.join(FX, "legacy"), os.path.join(FX, "migrated"), "--entry", "train.py", "--steps", "4",
                   "--json", str(out), "--", "--fp16")
    assert r.returncode == 0, r.stdout + r.stderr
    data = json.loads(out.read_text())
    assert data["mode"] == "fidelity" and data["apex_opt_levels"] == ["O2"]
    assert 0 < data["max_rel_diff"] < 1e-3
    assert "fidelity tolerance applies" in r.stdout
