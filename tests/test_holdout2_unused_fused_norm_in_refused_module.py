"""Held-out set 2 (s34): a silent site. A module whose amp code is refused (here: a training
`amp.initialize` and an inference one in different methods, A2A117) also imports apex's FusedLayerNorm
under a `try` with a local fallback, and never uses the name. On its own that import is removed
(A2A110); beside the refused amp code it is neither removed nor reported: no finding names its line,
so `benchmarks/coverage.py` counts it silent. Seen on a public BERT-learner package (the fallback
import of a fused norm next to a refused learner class). Expected: remove it (A2A110) or report it."""
import json
import subprocess
import sys
import textwrap

import pytest

NORM = '''
import torch


class LocalNorm(torch.nn.LayerNorm):
    pass
'''

LEARNER = '''
import torch

try:
    from apex import amp
    AMP_OK = True
except ImportError:
    AMP_OK = False

try:
    from apex.normalization.fused_layer_norm import FusedLayerNorm
except Exception:
    from .norms import LocalNorm as FusedLayerNorm


class Fitter:
    def __init__(self, net, opt, half):
        self.net, self.opt, self.half = net, opt, half

    def train(self, data):
        if self.half:
            self.net, self.opt = amp.initialize(self.net, self.opt, opt_level="O1")
        for x in data:
            loss = self.net(x).pow(2).mean()
            if self.half:
                with amp.scale_loss(loss, self.opt) as scaled:
                    scaled.backward()
            else:
                loss.backward()
            self.opt.step()
            self.opt.zero_grad()

    def infer(self, x):
        if self.half:
            self.net = amp.initialize(self.net, opt_level="O1")
        return self.net(x)
'''


def _tree(tmp_path):
    pkg = tmp_path / "fitpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "norms.py").write_text(textwrap.dedent(NORM).lstrip())
    (pkg / "fitter.py").write_text(textwrap.dedent(LEARNER).lstrip())
    return pkg


def _norm_import_line(text):
    return next(i for i, ln in enumerate(text.splitlines(), 1) if "fused_layer_norm" in ln)


def test_unused_fused_norm_import_is_removed_or_reported(tmp_path):
    pkg = _tree(tmp_path)
    out = subprocess.run([sys.executable, "-m", "apex2amp", "rewrite", "--format", "json", str(pkg)],
                         capture_output=True, text=True, cwd=tmp_path)
    text = (pkg / "fitter.py").read_text()
    assert "from apex import amp" in text  # the amp code stays refused (precondition of the shape)
    if "fused_layer_norm" not in text:
        return  # removed: fine
    line = _norm_import_line(text)
    report = json.loads(out.stdout)
    findings = [f for entry in report["files"] if entry["path"].endswith("fitter.py")
                for f in entry["findings"]]
    assert any(f["line"] == line for f in findings), (line, [(f["code"], f["line"]) for f in findings])


def test_the_same_import_alone_is_removed(tmp_path):
    """Control: without the refused amp code the unused import goes (A2A110)."""
    pkg = _tree(tmp_path)
    src = (pkg / "fitter.py").read_text()
    (pkg / "fitter.py").write_text(src.split("class Fitter")[0].split("try:\n    from apex import amp")[0]
                                   + "try:\n    from apex.normalization" + src.split("from apex.normalization")[1].split("class Fitter")[0])
    subprocess.run([sys.executable, "-m", "apex2amp", "rewrite", str(pkg)], capture_output=True, text=True,
                   cwd=tmp_path)
    assert "apex" not in (pkg / "fitter.py").read_text()
