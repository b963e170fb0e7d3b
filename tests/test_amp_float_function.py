"""`amp.float_function` (decorator or call) -> `autocast_float_function` (A2A182, codemods/amp_float_function.py):
golden files, and the migrated code run: under autocast the function gets fp32 arguments and computes in
fp32, outside autocast it is the function itself; `half_function` stays reported (A2A114)."""
import pytest
import torch

from codemods.base import Options
from golden import check_case, collect
from migrate.engine import rewrite_source


@pytest.mark.parametrize("case", collect(["amp_float_function"]), ids=lambda c: c.id)
def test_golden_amp_float_function(case):
    check_case(case)


SOURCE = '''import torch
from apex import amp


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 3)

    @amp.float_function
    def forward(self, x, extra=None):
        return self.proj(x), x.dtype, extra.dtype if extra is not None else None


dtype_of = amp.float_function(lambda t, scale=1.0: (t * scale).dtype)
'''


def _migrated():
    res = rewrite_source(SOURCE, path="head.py", module_name="head", options=Options(dtype="bfloat16", device="cpu"))
    assert res.error is None and "from apex" not in res.new_text, res.new_text
    namespace: dict = {}
    exec(compile(res.new_text, "head.py", "exec"), namespace)
    return namespace


def test_float_function_runs_fp32_under_autocast():
    ns = _migrated()
    head = ns["Head"]()
    x = torch.randn(2, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        plain = torch.nn.Linear(4, 3)(x)
        out, seen, extra = head(x.bfloat16(), extra=x.bfloat16())
        assert ns["dtype_of"](x.bfloat16()) == torch.float32
    assert plain.dtype == torch.bfloat16  # autocast is on around it
    assert (out.dtype, seen, extra) == (torch.float32, torch.float32, torch.float32)
    torch.testing.assert_close(out, head.proj(x.bfloat16().float()))  # computed in fp32
    assert ns["dtype_of"](x.bfloat16()) == torch.bfloat16  # no autocast: the arguments as given
