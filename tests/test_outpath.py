"""tools/outpath.py: a report is written whole or not at all, an earlier file at its path is
kept beside it, and a path that cannot be written is refused naming the option that gave it."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def outpath():
    """A fresh module, so that one test's written paths do not carry into another's."""
    sys.modules.pop("tools.outpath", None)
    return importlib.import_module("tools.outpath")


def test_a_new_path_is_written_and_its_folder_made(outpath, tmp_path: Path) -> None:
    out = tmp_path / "a" / "b" / "report.json"
    assert outpath.write_report(out, '{"x": 1}\n') is None
    assert out.read_text() == '{"x": 1}\n'
    assert sorted(p.name for p in out.parent.iterdir()) == ["report.json"]  # no temporary left


def test_an_earlier_file_is_kept_beside_and_later_writes_of_the_run_replace(
    outpath, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "report.json"
    out.write_text("committed\n")
    os.utime(out, (1_700_000_000, 1_700_000_000))
    kept = outpath.write_report(out, "first\n")
    assert kept is not None and kept.read_text() == "committed\n"
    assert kept.parent == tmp_path and kept.name.startswith("report.prev-")
    assert kept.suffix == ".json"
    assert str(kept) in capsys.readouterr().err
    # the same run saves its growing report again: replaced, nothing more kept
    assert outpath.write_report(out, "second\n") is None
    assert out.read_text() == "second\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["report.json", kept.name])


def test_a_second_run_keeps_both_earlier_files_under_distinct_names(
    outpath, tmp_path: Path
) -> None:
    out = tmp_path / "r.txt"
    out.write_text("one\n")
    os.utime(out, (1_700_000_000, 1_700_000_000))
    first = outpath.write_report(out, "two\n")
    os.utime(out, (1_700_000_000, 1_700_000_000))  # same mtime: the names must still differ
    outpath._WRITTEN.clear()  # as a new process would start
    second = outpath.write_report(out, "three\n")
    assert first is not None and second is not None and first != second
    assert (first.read_text(), second.read_text(), out.read_text()) == ("one\n", "two\n", "three\n")


def test_a_failed_write_leaves_the_earlier_file_and_no_copy(
    outpath, tmp_path: Path, monkeypatch
) -> None:
    out = tmp_path / "report.json"
    out.write_text("earlier\n")

    def broken(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(outpath.os, "replace", broken)
    with pytest.raises(OSError, match="No space left"):
        outpath.write_report(out, "new\n")
    assert out.read_text() == "earlier\n"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_out_problem_names_the_option(outpath, tmp_path: Path) -> None:
    assert outpath.out_problem(tmp_path / "x.json", "x.json") is None
    msg = outpath.out_problem(tmp_path, "cconv-host.txt", "--profile")
    assert (
        msg
        == f"--profile {tmp_path} is a folder; give a file name, e.g. {tmp_path / 'cconv-host.txt'}"
    )
    assert outpath.out_problem(tmp_path, "r.json").startswith(f"--out {tmp_path} is a folder")
