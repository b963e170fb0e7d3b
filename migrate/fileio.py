"""Reading sources exactly as they are, and writing them back atomically.

A source keeps its encoding (PEP 263 cookie or UTF-8), its BOM and its line endings byte for byte:
text is decoded without newline translation and re-encoded the same way. Writes go to a temporary
file in the same folder, take the original's mode, and replace it with one rename; a file that
changed on disk since it was read is never overwritten.
"""
from __future__ import annotations

import codecs
import io
import os
import stat
import tempfile
import tokenize
from dataclasses import dataclass
from typing import Optional

MAX_BYTES = 20 * 1024 * 1024


class SourceError(Exception):
    """A file that cannot be processed; the message says why."""


@dataclass
class Source:
    path: str
    data: bytes
    text: str
    encoding: str = "utf-8"
    bom: bool = False

    def encode(self, text: str) -> bytes:
        body = text.encode(self.encoding)
        return (codecs.BOM_UTF8 + body) if self.bom else body


def read_bytes(path: str) -> bytes:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise SourceError("dangling symbolic link") from None
        raise SourceError("no such file") from None
    except OSError as e:
        if e.errno == 40:  # ELOOP
            raise SourceError("symbolic link loop") from None
        raise SourceError(f"cannot stat: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise SourceError("not a regular file")
    if st.st_size > MAX_BYTES:
        raise SourceError(f"file too large ({st.st_size} bytes)")
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except PermissionError:
        raise SourceError("permission denied (unreadable)") from None
    except OSError as e:
        raise SourceError(f"cannot read: {e.strerror}") from None


def _first_two_lines(data: bytes) -> int:
    """The length of the first two lines of `data` (where PEP 263 allows a coding cookie)."""
    end = data.find(b"\n")
    if end < 0:
        return len(data)
    end = data.find(b"\n", end + 1)
    return len(data) if end < 0 else end + 1


def decode_error(path: str, data: bytes, python: bool) -> Optional[str]:
    """Why a file's bytes cannot be decoded (as Python source when `python`, else as text), or None.
    Every screen asks it, so binary, undecodable and badly declared files are always reported."""
    try:
        if python:
            decode_python(path, data)
        else:
            decode_text(path, data)
    except SourceError as e:
        return str(e)
    return None


def decode_python(path: str, data: bytes) -> Source:
    """Decode Python source bytes honouring BOM and PEP 263, without newline translation."""
    if b"\x00" in data:
        raise SourceError("binary data (NUL bytes), not Python source")
    bom = data.startswith(codecs.BOM_UTF8)
    if not bom and b"coding" not in data[:_first_two_lines(data)]:
        try:  # no BOM, no cookie: detect_encoding would say utf-8, and decoding all of it proves the lines
            return Source(path, data, data.decode("utf-8"), "utf-8", False)
        except UnicodeDecodeError:
            pass  # the slow path below words the error as before
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as e:
        raise SourceError(f"bad encoding declaration: {e}") from None
    if encoding == "utf-8-sig":
        encoding = "utf-8"
    body = data[len(codecs.BOM_UTF8):] if bom else data
    try:
        text = body.decode(encoding)
    except (UnicodeDecodeError, LookupError) as e:
        raise SourceError(f"cannot decode as {encoding}: {e}") from None
    return Source(path, data, text, encoding, bom)


def decode_text(path: str, data: bytes) -> Source:
    """Decode a non-Python text file (shell, Markdown, notebook JSON) as UTF-8."""
    if b"\x00" in data:
        raise SourceError("binary data (NUL bytes)")
    bom = data.startswith(codecs.BOM_UTF8)
    body = data[3:] if bom else data
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SourceError(f"cannot decode as utf-8: {e}") from None
    return Source(path, data, text, "utf-8", bom)


def write_atomic(path: str, new_data: bytes, expected_old: Optional[bytes]) -> None:
    """Replace `path` with `new_data` in one rename, keeping its mode.

    Refuses (SourceError) when the file on disk no longer holds `expected_old`.
    """
    real = os.path.realpath(path)
    folder = os.path.dirname(real) or "."
    try:
        st = os.stat(real)
    except OSError as e:
        raise SourceError(f"cannot stat before writing: {e.strerror}") from None
    if expected_old is not None:
        try:
            with open(real, "rb") as fh:
                current = fh.read()
        except OSError as e:
            raise SourceError(f"cannot re-read before writing: {e.strerror}") from None
        if current != expected_old:
            raise SourceError("file changed on disk while it was being processed; not overwritten")
    if not os.access(real, os.W_OK) or not (st.st_mode & stat.S_IWUSR):
        raise SourceError("file is read-only; not overwritten")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".apex2amp-", suffix=".tmp", dir=folder)
    except OSError as e:
        raise SourceError(f"cannot create a temporary file next to it: {e.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(new_data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, stat.S_IMODE(st.st_mode))
        os.replace(tmp, real)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
