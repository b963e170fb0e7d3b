"""The `autocast_forward` helper that `amp.initialize(model)` without optimizers becomes (spec 2.6 b):
the forward runs under autocast and its floating-point outputs come back in fp32, nested or not."""
import collections

import torch

from codemods.base import Options
from migrate.engine import rewrite_source

SOURCE = '''import torch
from apex import amp


def prepare(model):
    model = amp.initialize(model, opt_level="O1")
    return model
'''


def _migrated_prepare():
    res = rewrite_source(SOURCE, path="infer.py", module_name="infer",
                         options=Options(dtype="bfloat16", device="cpu"))
    assert res.error is None and "autocast_forward(model.forward, \"cpu\", torch.bfloat16)" in res.new_text
    assert "from apex" not in res.new_text
    namespace: dict = {}
    exec(compile(res.new_text, "infer.py", "exec"), namespace)
    return namespace["prepare"]


class _Outputs(torch.nn.Module):
    Pair = collections.namedtuple("Pair", "logits index")

    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.inner(x)
        return {"logits": y, "both": [y, (y, torch.arange(2))], "pair": self.Pair(y, torch.arange(3))}


def test_outputs_come_back_in_fp32_while_the_forward_ran_in_bf16():
    model = _migrated_prepare()(_Outputs())
    seen = []
    model.inner.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    out = model(torch.randn(2, 4))
    assert seen == [torch.bfloat16]
    assert out["logits"].dtype == torch.float32
    assert [t.dtype for t in (out["both"][0], out["both"][1][0])] == [torch.float32, torch.float32]
    assert out["both"][1][1].dtype == torch.int64  # integer tensors are left alone
    assert isinstance(out["pair"], _Outputs.Pair) and out["pair"].logits.dtype == torch.float32


def test_a_plain_tensor_output_and_backward_work():
    model = _migrated_prepare()(torch.nn.Linear(3, 2))
    out = model(torch.randn(5, 3))
    assert out.dtype == torch.float32
    out.sum().backward()
    assert model.weight.grad is not None and model.weight.grad.dtype == torch.float32
