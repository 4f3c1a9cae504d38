"""Stale records: the code hash covers what git tracks, a stale record names the files that
differ, and the baseline idea (000-*) is shown on the board but never wins."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from ladder import board, codehash, records
from ladder.cli import app
from tests.fixtures.ladder.helpers import copy_toy, idea_path
from tests.fixtures.ladder.recgen import make_record

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(root: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", "-C", str(root), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **_ENV},
        check=True,
    )
    return proc.stdout.strip()


def put(root: Path, folder: str, *, created: str, fwd: tuple, commit: str | None) -> dict:
    """A passed, clean record of the idea's code as hashed now, made at ``commit``."""
    sha = codehash.code_sha(codehash.idea_files_from_dir(idea_path(root, folder)))
    rec = make_record(idea=folder, code_sha=sha, created=created, fwd=fwd, bwd=(2.0, 2.0))
    rec["commit"] = commit
    if commit is None:
        rec["dirty"] = True
    records.write_record(idea_path(root, folder), rec)
    return rec


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """The toy tree in a git repository, records removed, everything committed."""
    root = copy_toy(tmp_path, records=False)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "toy")
    return root


def test_untracked_stray_files_do_not_change_the_code_hash(repo: Path) -> None:
    folder = idea_path(repo, "001-fast")
    before = codehash.code_sha(codehash.idea_files_from_dir(folder))
    head = git(repo, "rev-parse", "HEAD")
    assert before == codehash.code_sha(
        codehash.idea_files_at_commit(repo, head, "kernels/toy/ideas/001-fast")
    )
    (folder / ".DS_Store").write_bytes(b"\0\1junk")
    (folder / "kernel.py~").write_text("# an editor's backup\n")
    (folder / "sub").mkdir()
    (folder / "sub" / "scratch.py").write_text("x = 1\n")
    assert codehash.code_sha(codehash.idea_files_from_dir(folder)) == before
    # the knob scan still sees every module Python could import
    assert "sub/scratch.py" in codehash.idea_files_all(folder)
    # a tracked file's edits count, as does a file once added
    (folder / "kernel.py").write_text((folder / "kernel.py").read_text() + "# edit\n")
    edited = codehash.code_sha(codehash.idea_files_from_dir(folder))
    assert edited != before
    git(repo, "add", "kernels/toy/ideas/001-fast/sub/scratch.py")
    assert codehash.code_sha(codehash.idea_files_from_dir(folder)) != edited


def test_stray_file_keeps_the_winner(repo: Path) -> None:
    head = git(repo, "rev-parse", "HEAD")
    rec = put(repo, "001-fast", created="2026-02-01T00:00:00Z", fwd=(0.5, 1.0), commit=head)
    (idea_path(repo, "001-fast") / ".DS_Store").write_bytes(b"junk")
    (idea_path(repo, "001-fast") / "kernel.py~").write_text("old\n")
    b = board.build_board("toy", repo)
    rows = {r.idea: r for r in b.rows}
    assert rows["001-fast"].stale is False and rows["001-fast"].winner is True
    assert b.winner is not None and b.winner.record["record_id"] == rec["record_id"]


def test_stale_record_names_the_files_that_differ(repo: Path) -> None:
    head = git(repo, "rev-parse", "HEAD")
    rec = put(repo, "001-fast", created="2026-02-01T00:00:00Z", fwd=(0.5, 1.0), commit=head)
    folder = idea_path(repo, "001-fast")
    (folder / "kernel.py").write_text((folder / "kernel.py").read_text() + "# edit\n")
    (folder / "helper.py").write_text("X = 1\n")
    git(repo, "add", "kernels/toy/ideas/001-fast/helper.py")
    (folder / "kernel.py~").write_text("untracked, never named\n")
    b = board.build_board("toy", repo)
    row = next(r for r in b.rows if r.idea == "001-fast")
    assert row.stale is True and row.record_id == rec["record_id"]
    assert row.stale_why == f"helper.py added, kernel.py changed since commit {head[:12]}"
    assert b.winner is None
    assert "helper.py added, kernel.py changed" in (b.no_winner or "")
    out = io.StringIO()
    board.render_board(b, Console(file=out, width=100))
    assert f"stale: 001-fast record {rec['record_id']}: helper.py added" in out.getvalue()
    # what it cannot tell, it says
    nocommit = dict(rec, commit=None)
    assert records.explain_stale(nocommit, folder) == (
        "code differs from the record's (it names no commit, so the files are unknown)"
    )
    other = dict(rec, code_sha=codehash.code_sha({}))
    assert "benched on code other than commit" in records.explain_stale(other, folder)


def test_removed_file_is_named(repo: Path) -> None:
    folder = idea_path(repo, "001-fast")
    (folder / "extra.py").write_text("Y = 2\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "extra")
    head = git(repo, "rev-parse", "HEAD")
    rec = put(repo, "001-fast", created="2026-02-01T00:00:00Z", fwd=(0.5, 1.0), commit=head)
    git(repo, "rm", "-q", "kernels/toy/ideas/001-fast/extra.py")
    assert records.explain_stale(rec, folder) == f"extra.py removed since commit {head[:12]}"


def test_outside_git_the_old_rule_holds_and_says_it_cannot_tell(tmp_path: Path) -> None:
    root = copy_toy(tmp_path, records=False)
    rec = put(root, "001-fast", created="2026-02-01T00:00:00Z", fwd=(0.5, 1.0), commit="a" * 40)
    (idea_path(root, "001-fast") / ".DS_Store").write_bytes(b"junk")
    row = next(r for r in board.build_board("toy", root).rows if r.idea == "001-fast")
    assert row.stale is True and row.record_id == rec["record_id"]
    assert "is not in this repository, so the files are unknown" in (row.stale_why or "")


def test_baseline_is_shown_but_never_wins(repo: Path) -> None:
    head = git(repo, "rev-parse", "HEAD")
    base = put(repo, "000-base", created="2026-01-01T00:00:00Z", fwd=(0.1, 1.0), commit=head)
    fast = put(repo, "001-fast", created="2026-02-01T00:00:00Z", fwd=(0.9, 1.0), commit=head)
    win = records.winner("toy", repo)
    assert win.idea == "001-fast" and win.record["record_id"] == fast["record_id"]
    b = board.build_board("toy", repo)
    rows = {r.idea: r for r in b.rows}
    assert rows["000-base"].record_id == base["record_id"]  # on the board, with its numbers
    assert rows["000-base"].prod_ratio == pytest.approx(records.prod_ratio(base))
    assert rows["000-base"].baseline and not rows["000-base"].promotable
    assert not rows["000-base"].winner and rows["001-fast"].winner


def test_winner_command_names_a_better_stale_record(repo: Path) -> None:
    head = git(repo, "rev-parse", "HEAD")
    put(repo, "003-wrong-taps", created="2026-01-01T00:00:00Z", fwd=(0.9, 1.0), commit=head)
    fast = put(repo, "001-fast", created="2026-02-01T00:00:00Z", fwd=(0.2, 1.0), commit=head)
    kernel = idea_path(repo, "001-fast") / "kernel.py"
    kernel.write_text(kernel.read_text() + "# edit\n")
    result = CliRunner().invoke(app, ["--root", str(repo), "winner", "toy"])
    assert result.exit_code == 0, result.output
    assert "winner: 003-wrong-taps" in result.stdout
    want = f"passed over: 001-fast record {fast['record_id']}"
    assert want in result.stdout and f"kernel.py changed since commit {head[:12]}" in result.stdout
    data = json.loads(
        CliRunner().invoke(app, ["--root", str(repo), "winner", "toy", "--json"]).stdout
    )
    assert len(data["passed_over"]) == 1 and "kernel.py changed" in data["passed_over"][0]
