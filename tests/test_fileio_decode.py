"""decode_python's no-cookie fast path decides exactly what tokenize.detect_encoding decides."""
from __future__ import annotations

import codecs
import io
import tokenize
from typing import Tuple

import pytest

from migrate.fileio import SourceError, decode_python

CASES = {
    "plain": b"x = 1\n",
    "empty": b"",
    "no_newline": b"x = 1",
    "utf8_text": "s = 'caf\u00e9'\n".encode("utf-8"),
    "cookie_line1": b"# -*- coding: latin-1 -*-\ns = '\xe9'\n",
    "cookie_line2": b"#!/usr/bin/env python\n# coding: latin-1\ns = '\xe9'\n",
    "cookie_line3_ignored": b"#!/usr/bin/env python\n\n# coding: latin-1\ns = 1\n",
    "cookie_after_code_ignored": b"x = 1\n# coding: latin-1\n",
    "coding_word_in_code": b"encoding = 'coding: utf-8'\nx = 1\n",
    "bad_cookie": b"# coding: no-such-codec\nx = 1\n",
    "cookie_ascii_body": b"# vim: set fileencoding=latin-1 :\nx = 1\n",
    "bom": codecs.BOM_UTF8 + b"x = 1\n",
    "bom_with_latin_cookie": codecs.BOM_UTF8 + b"# coding: latin-1\nx = 1\n",
    "latin1_without_cookie": b"s = '\xe9'\n",
    "latin1_late_without_cookie": b"x = 1\ny = 2\nz = 3\ns = '\xe9'\n",
    "cr_only": b"# c\rx = 1\rs = '\xc3\xa9'\r",
    "crlf_cookie": b"# coding: latin-1\r\ns = '\xe9'\r\n",
    "nul": b"x = 1\x00\n",
}


def _reference(data: bytes) -> Tuple[str, ...]:
    """What decode_python answered before its fast path: tokenize's decision, then the decode."""
    if b"\x00" in data:
        return ("error", "binary data (NUL bytes), not Python source")
    bom = data.startswith(codecs.BOM_UTF8)
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as e:
        return ("error", f"bad encoding declaration: {e}")
    encoding = "utf-8" if encoding == "utf-8-sig" else encoding
    body = data[3:] if bom else data
    try:
        return ("ok", body.decode(encoding), encoding, str(bom))
    except (UnicodeDecodeError, LookupError) as e:
        return ("error", f"cannot decode as {encoding}: {e}")


def _actual(data: bytes) -> Tuple[str, ...]:
    try:
        src = decode_python("f.py", data)
    except SourceError as e:
        return ("error", str(e))
    return ("ok", src.text, src.encoding, str(src.bom))


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_decision_as_tokenize(name: str) -> None:
    assert _actual(CASES[name]) == _reference(CASES[name])
