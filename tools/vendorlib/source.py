"""Source bytes read from git objects, as the text the passes parse.

A blob may hold CRLF, lone CR or mixed line endings and a UTF-8 byte-order mark (a file
committed from another editor or without ``.gitattributes``). libcst's native parser keeps
the newline it finds whatever ``default_newline`` says, so the text is normalised before
parsing: the BOM dropped, every line ending LF. The vendor therefore always writes LF.
"""

from __future__ import annotations

import hashlib

from .common import VendorError

BOM = b"\xef\xbb\xbf"


def normalise_newlines(data: bytes) -> bytes:
    """``data`` with CRLF and lone CR as LF (nothing else changed)."""
    return data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")


def source_text(data: bytes, relpath: str) -> str:
    """The text of a Python source blob: UTF-8 without a BOM, LF line endings.

    Raises VendorError (``relpath:line: not UTF-8 text ...``) for bytes that are not UTF-8.
    """
    if data.startswith(BOM):
        data = data[len(BOM) :]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise VendorError(
            f"{relpath}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x}); save the file "
            "as UTF-8 and commit it"
        ) from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def content_sha256(data: bytes) -> str:
    """sha256 of a text file's bytes with LF line endings: what drift and the vendor compare
    for a file on disk, so a checkout that writes CRLF (``core.autocrlf``) is no edit."""
    return hashlib.sha256(normalise_newlines(data)).hexdigest()
