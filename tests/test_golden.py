"""Every fixture pair under fixtures/ (see tests/golden.py for the conventions)."""
import pytest

from golden import check_case, collect

CASES = collect()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_golden(case):
    check_case(case)
