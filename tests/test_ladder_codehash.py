"""code_sha: stable across checkouts and commits, blind to records/, NOTES.md and bytecode."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from ladder import codehash

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

IDEA = "ladder/kernels/toy/ideas/001-fast"


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "origin"
    idea = repo / IDEA
    (idea / "records").mkdir(parents=True)
    (idea / "sub").mkdir()
    (idea / "kernel.py").write_text("X = 1\n")
    (idea / "sub" / "helper.py").write_text("def f():\n    return 2\n")
    (idea / "NOTES.md").write_text("# notes\n")
    (idea / "records" / ".gitkeep").write_text("")
    (idea / "records" / "r1.json").write_text("{}\n")
    _git(tmp_path, "init", "-q", str(repo))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "idea")
    return repo


def test_same_sha_from_dir_clones_and_commit(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    head = _git(repo, "rev-parse", "HEAD").strip()
    shas = {codehash.code_sha(codehash.idea_files_from_dir(repo / IDEA))}
    for name in ("clone1", "clone2"):
        _git(tmp_path, "clone", "-q", str(repo), str(tmp_path / name))
        shas.add(codehash.code_sha(codehash.idea_files_from_dir(tmp_path / name / IDEA)))
    at_commit = codehash.idea_files_at_commit(repo, head, IDEA)
    shas.add(codehash.code_sha(at_commit))
    assert len(shas) == 1
    assert sorted(at_commit) == ["kernel.py", "sub/helper.py"]
    assert at_commit["sub/helper.py"] == b"def f():\n    return 2\n"
    # the definition: sha256 over sorted "relpath NUL sha256(bytes) LF"
    h = hashlib.sha256()
    for rel in sorted(at_commit):
        h.update(rel.encode() + b"\0" + hashlib.sha256(at_commit[rel]).hexdigest().encode() + b"\n")
    assert shas == {h.hexdigest()}


def test_blind_to_records_notes_and_bytecode(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    idea = repo / IDEA
    before = codehash.code_sha(codehash.idea_files_from_dir(idea))
    (idea / "records" / "r2.json").write_text('{"a": 1}\n')
    (idea / "NOTES.md").write_text("# notes, longer now\n")
    (idea / "__pycache__").mkdir()
    (idea / "__pycache__" / "kernel.cpython-311.pyc").write_bytes(b"\0\1")
    (idea / "sub" / "helper.pyc").write_bytes(b"\0\2")
    assert codehash.code_sha(codehash.idea_files_from_dir(idea)) == before
    (idea / "kernel.py").write_text("X = 2\n")
    changed = codehash.code_sha(codehash.idea_files_from_dir(idea))
    assert changed != before
    (idea / "kernel.py").write_text("X = 1\n")
    assert codehash.code_sha(codehash.idea_files_from_dir(idea)) == before
    (idea / "sub" / "helper.py").rename(idea / "sub" / "helper2.py")
    assert codehash.code_sha(codehash.idea_files_from_dir(idea)) != before


def test_commit_reading_follows_history(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    first = _git(repo, "rev-parse", "HEAD").strip()
    (repo / IDEA / "kernel.py").write_text("X = 3\n")
    _git(repo, "commit", "-qam", "change")
    second = _git(repo, "rev-parse", "HEAD").strip()
    a = codehash.code_sha(codehash.idea_files_at_commit(repo, first, IDEA))
    b = codehash.code_sha(codehash.idea_files_at_commit(repo, second, IDEA))
    assert a != b
    assert b == codehash.code_sha(codehash.idea_files_from_dir(repo / IDEA))
    with pytest.raises(codehash.CodeHashError, match="not in the tree"):
        codehash.idea_files_at_commit(repo, first, "ladder/kernels/toy/ideas/009-none")
    with pytest.raises(codehash.CodeHashError, match="git"):
        codehash.idea_files_at_commit(repo, "0" * 40, IDEA)


@pytest.mark.parametrize(
    ("relpath", "is_code"),
    [
        ("kernel.py", True),
        ("sub/mod.py", True),
        ("data/table.txt", True),
        ("NOTES.md", False),
        ("records/x.json", False),
        ("records/.gitkeep", False),
        ("__pycache__/kernel.cpython-311.pyc", False),
        ("sub/__pycache__/m.cpython-311.pyc", False),
        ("mod.pyc", False),
        ("sub/NOTES.md", True),
    ],
)
def test_is_code_file(relpath: str, is_code: bool) -> None:
    assert codehash.is_code_file(relpath) is is_code


def test_harness_sha_covers_the_ladder_sources() -> None:
    pkg = Path(codehash.__file__).resolve().parent
    files = {p.name: p.read_bytes() for p in pkg.glob("*.py")}
    assert {"cli.py", "bench.py", "records.py", "timing.py"} <= set(files)
    assert codehash.harness_sha() == codehash.code_sha(files)
    assert len(codehash.harness_sha()) == 64
