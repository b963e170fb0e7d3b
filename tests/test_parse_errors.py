"""A source libcst's parser takes but its node validation rejects is reported as unparsable."""
from __future__ import annotations

import libcst as cst
import pytest

from migrate.engine import rewrite_source


def test_a_source_only_validation_rejects_reports_the_parse_error():
    """libcst's parser accepts `a if b else(lambda: c)` and its node validation rejects it: the file is
    reported as unparsable, not as a codemod's internal error, and left as it is."""
    text = "from apex.normalization import FusedLayerNorm\nln = FusedLayerNorm(10) if big else(lambda: None)\n"
    with pytest.raises(Exception) as plain:
        cst.parse_module(text)
    result = rewrite_source(text, path="m.py", module_name="m")
    assert result.error is not None and result.error.startswith("cannot parse"), result.error
    assert str(plain.value).splitlines()[0] in result.error
    assert result.new_text == text
