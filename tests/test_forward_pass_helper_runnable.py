"""Runnable check, on the CPU, of the region around a call of a module-level forward helper (issue 24,
DPR's `_do_biencoder_fwd_pass` shape): `amp.initialize` in train.py, the step in steps.py handing
`self.net` to `_forward_pass`; the legacy program on the apex emulation, its rewrite by the CLI and a
hand migration are compared step by step in O0, O1 and O2."""
import math
import os
import shutil
import subprocess
import sys

import pytest

from migrate.verify import collect_losses

FIXTURE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "runnable",
                       "forward_pass_helper")


@pytest.fixture(scope="module")
def tool(tmp_path_factory):
    dst = tmp_path_factory.mktemp("forward_helper_tool")
    shutil.copytree(os.path.join(FIXTURE, "legacy"), dst, dirs_exist_ok=True)
    res = subprocess.run([sys.executable, "-m", "migrate", "rewrite", str(dst)], capture_output=True, text=True)
    assert res.returncode == 1, res.stdout + res.stderr
    with open(os.path.join(dst, "steps.py"), encoding="utf-8") as fh:
        text = fh.read()
    assert "apex" not in text and "A2A116" not in res.stdout, res.stdout
    region = text.split("with torch.autocast(", 1)[1].split("scaler.scale(loss)", 1)[0]
    assert "_forward_pass(self.net, batch" in region
    return str(dst)


@pytest.mark.parametrize("level", ["O0", "O1", "O2"])
def test_forward_helper_region_matches_apex_step_by_step(tool, level):
    run = ["--steps", "6", "--opt-level", level]
    recs = [collect_losses(d, "train.py", run, steps=1000, device="cpu")[0]
            for d in (os.path.join(FIXTURE, "legacy"), os.path.join(FIXTURE, "migrated"), tool)]
    legacy, hand, rewritten = ([(r["losses"], r["skipped"], r["scale"]) for r in rs] for rs in recs)
    assert len(hand) == 6 and rewritten == hand
    tol = 2e-2 if level == "O2" else 1e-3  # O2 becomes the O1 recipe (fp32 weights + autocast)
    for (la, sa, ca), (lh, sh, ch) in zip(legacy, hand):
        assert sa == sh and all(math.isclose(x, y, rel_tol=tol) for x, y in zip(la, lh)), (legacy, hand)
