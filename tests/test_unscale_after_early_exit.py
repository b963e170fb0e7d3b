"""`scaler.unscale_` after an early exit of gradient accumulation (`continue` / `return` before the clip).

The migrated code is run with real torch on the CPU for several accumulation windows: an `unscale_`
placed right after the backward would run on micro-batches that do not step, and GradScaler raises
on the next one ("unscale_() has already been called ... since the last update()").
"""
import os

import pytest
import torch

from codemods.base import Options
from migrate.engine import Selection, rewrite_source

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures",
                        "amp_accumulation_exits")


def _migrated_namespace(case: str) -> dict:
    with open(os.path.join(FIXTURES, case + ".before.py"), encoding="utf-8") as fh:
        src = fh.read()
    res = rewrite_source(src, path=case + ".py", module_name=case, options=Options(), select=Selection())
    assert res.error is None
    assert "apex" not in res.new_text
    ns: dict = {}
    exec(compile(res.new_text.replace('"cuda"', '"cpu"'), case + ".py", "exec"), ns)  # CPU stands in for CUDA
    return ns


def _data(n):
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(8, 4, generator=g), torch.randn(8, 2, generator=g)) for _ in range(n)]


def test_continue_before_clip_steps_every_window():
    ns = _migrated_namespace("continue_before_clip")
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    before = model.weight.detach().clone()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ns["train"](model, opt, _data(12), accum_steps=4, max_norm=1.0)  # three windows, no RuntimeError
    assert not torch.equal(before, model.weight)


@pytest.mark.parametrize("accum", [2, 3])
def test_return_before_clip_clips_unscaled_gradients(accum):
    ns = _migrated_namespace("return_before_clip")
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    ref = torch.nn.Linear(4, 2)
    ref.load_state_dict(model.state_dict())
    trainer = ns["Trainer"](model, torch.optim.SGD(model.parameters(), lr=0.1), accum, max_norm=1e6)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for i, (x, y) in enumerate(_data(3 * accum)):
        norm = trainer.train_step(x, y)
        (torch.nn.functional.mse_loss(ref(x), y) / accum).backward()
        if (i + 1) % accum:
            assert norm is False
            continue
        ref_norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), 1e6)
        ref_opt.step()
        ref_opt.zero_grad()
        # the clip read unscaled gradients: the norm matches fp32 training, not 65536 times it
        assert float(norm) == pytest.approx(float(ref_norm), rel=0.05)
