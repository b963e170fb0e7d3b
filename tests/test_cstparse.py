"""The validation-free parse gives libcst's own tree, and leaves node validation on afterwards."""
from __future__ import annotations

import glob
import os
import threading

import libcst as cst
import pytest

from migrate import cstparse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _sources():
    for p in sorted(glob.glob(os.path.join(ROOT, "fixtures", "**", "*.py"), recursive=True)):
        text = open(p, "rb").read().decode("utf-8", "surrogateescape")
        try:
            cst.parse_module(text)
        except Exception:  # the deliberately broken fixtures
            continue
        yield os.path.relpath(p, ROOT), text


def _validating() -> bool:
    try:
        cst.Name("")  # libcst's validation rejects an empty name
    except cst.CSTValidationError:
        return True
    return False


@pytest.mark.parametrize("name,text", list(_sources()), ids=lambda v: v if isinstance(v, str) and
                         v.endswith(".py") else "")
def test_same_tree_as_libcst(name: str, text: str) -> None:
    fast = cstparse.parse_module(text)
    assert fast.deep_equals(cst.parse_module(text)), name
    assert fast.code == text
    assert _validating()


def test_validation_stays_on_after_a_failed_parse() -> None:
    with pytest.raises(cst.ParserSyntaxError):
        cstparse.parse_module("def f(:\n")
    assert _validating()


def test_concurrent_parses_leave_validation_on() -> None:
    text = open(os.path.join(ROOT, "fixtures", "demo", "train.py")).read() \
        if os.path.exists(os.path.join(ROOT, "fixtures", "demo", "train.py")) else "x = f(a, b)\n" * 500
    errors = []

    def parse_many() -> None:
        try:
            for _ in range(5):
                cstparse.parse_module(text)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=parse_many) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert _validating()


def test_a_source_only_validation_rejects_still_reports_the_parse_error(tmp_path):
    """libcst's parser accepts `a if b else(lambda: c)` and its node validation rejects it: the file is
    reported as unparsable, as with the validating parse, not as a codemod's internal error."""
    from migrate.engine import rewrite_source
    text = "from apex.normalization import FusedLayerNorm\nln = FusedLayerNorm(10) if big else(lambda: None)\n"
    with pytest.raises(Exception) as plain:
        cst.parse_module(text)
    result = rewrite_source(text, path="m.py", module_name="m")
    assert result.error is not None and result.error.startswith("cannot parse"), result.error
    assert str(plain.value).splitlines()[0] in result.error
    assert result.new_text == text
