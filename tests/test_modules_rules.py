"""apex_modules rules beyond the golden pairs: name resolution, options, rule docs."""
from codemods.base import RULES, Options
from codemods.apex_modules import ApexModulesToTorch
from codemods.hazards import Fp16HazardLint
from codemods.manual_scaling import ManualLossScalingToGradScaler
from migrate.engine import rewrite_source


def test_import_apex_as_amp_resolves_submodules():
    src = "import torch\nimport apex as amp\n\nopt = amp.optimizers.FusedAdam(params, lr=1e-3)\n"
    res = rewrite_source(src)
    assert "torch.optim.AdamW(params, lr=1e-3, weight_decay=0.0, fused=True)" in res.new_text


def test_adds_import_torch_when_missing():
    src = "from apex.optimizers import FusedSGD\n\nopt = FusedSGD(params, lr=0.1)\n"
    res = rewrite_source(src)
    assert res.new_text.startswith("import torch\n")
    assert "torch.optim.SGD(params, lr=0.1, fused=True)" in res.new_text


def test_min_torch_controls_fused_flag():
    src = "import torch\nfrom apex.optimizers import FusedAdam\nopt = FusedAdam(p, adam_w_mode=False)\n"
    old = rewrite_source(src, options=Options(min_torch=(1, 12))).new_text
    assert "torch.optim.Adam(p, weight_decay=0.0, foreach=True)" in old
    new = rewrite_source(src, options=Options(min_torch=(1, 13))).new_text
    assert "torch.optim.Adam(p, weight_decay=0.0, fused=True)" in new


def test_suppression_comment_leaves_call():
    src = "import torch\nfrom apex.optimizers import FusedAdam\nopt = FusedAdam(p)  # apex2amp: ignore[A2A301]\n"
    res = rewrite_source(src)
    assert "FusedAdam(p)" in res.new_text


def test_every_code_is_registered_with_docs():
    for cm in (ApexModulesToTorch, ManualLossScalingToGradScaler, Fp16HazardLint):
        for code in cm.CODES:
            r = RULES[code]
            assert r.why and r.before and r.summary, code
