"""apex's old `amp.init()` API in an evaluation `main()`: the rest of the function becomes one autocast
region (A2A180, codemods/amp_old_init.py) when nothing runs after it; the handle used, a caller that goes
on computing, or the call under an `if` keep the code byte-identical with an A2A115 finding."""
import pytest

from golden import check_case, collect


@pytest.mark.parametrize("case", collect(["amp_old_init"]), ids=lambda c: c.id)
def test_golden_amp_old_init(case):
    check_case(case)
