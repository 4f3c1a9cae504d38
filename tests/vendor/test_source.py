"""Source bytes -> the text the passes parse: UTF-8 without BOM, LF; .gitattributes pins LF."""

from __future__ import annotations

import subprocess

import pytest

from tests.ladderfab import REPO, vl


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (b"a = 1\nb = 2\n", "a = 1\nb = 2\n"),
        (b"a = 1\r\nb = 2\r\n", "a = 1\nb = 2\n"),
        (b"a = 1\rb = 2\r", "a = 1\nb = 2\n"),
        (b"a = 1\r\nb = 2\rc = 3\n", "a = 1\nb = 2\nc = 3\n"),
        (b"\xef\xbb\xbfa = '\xc3\xa9'\r\n", "a = '\u00e9'\n"),
    ],
)
def test_line_endings_and_bom_are_normalised(data, text):
    assert vl.source_text(data, "k.py") == text
    assert vl.normalise_newlines(data.removeprefix(b"\xef\xbb\xbf")) == text.encode()
    assert vl.content_sha256(data.removeprefix(b"\xef\xbb\xbf")) == vl.sha256(text.encode())


def test_bytes_that_are_not_utf8_are_a_one_line_error_with_the_line():
    with pytest.raises(vl.VendorError) as err:
        vl.source_text(b"a = 1\nb = '\xe9'\n", "ideas/001-x/kernel.py")
    assert str(err.value).startswith("ideas/001-x/kernel.py:2: not UTF-8 text (byte 0xe9)")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "path", ["a.py", "x/b.json", "c.md", "pyproject.toml", "r.txt", "Makefile", "t.sh", "w.yml"]
)
def test_gitattributes_pins_lf(path):
    out = subprocess.run(
        ["git", "-C", str(REPO), "check-attr", "eol", "--", path],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip().endswith("eol: lf"), out
