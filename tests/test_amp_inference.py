"""`amp.initialize` for inference only: models (a list of names too) without optimizers, several calls in
one module, each model's forward under autocast (codemods/amp_inference.py); the shapes that stay
reported: a training initialize beside them, a model list bound to one name, O3."""
import pytest

from golden import check_case, collect


@pytest.mark.parametrize("case", collect(["amp_inference"]), ids=lambda c: c.id)
def test_golden_amp_inference(case):
    check_case(case)
