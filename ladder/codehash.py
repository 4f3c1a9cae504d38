"""Content hashes: an idea's code (``code_sha``) and the harness's own source (``harness_sha``).

``code_sha`` is a sha256 over the sorted ``(relpath, sha256(bytes))`` pairs of an idea
folder's code files, so it depends only on the bytes and the posix paths relative to the
folder: the same from a working tree, a clone or a commit's tree. Records, NOTES.md and
bytecode are not code.

Which files are the idea's: in a git checkout, the files git tracks in the folder (their
working-tree bytes), so a stray untracked file (``.DS_Store``, an editor's ``kernel.py~``)
never changes the code_sha, and a clean tree hashes exactly as the commit's tree does. A
folder where git tracks nothing (outside a checkout, or not added yet) falls back to every
regular file under it.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

__all__ = [
    "CodeHashError",
    "code_sha",
    "diff_files",
    "harness_sha",
    "idea_files_all",
    "idea_files_at_commit",
    "idea_files_from_dir",
    "idea_files_in_history",
    "is_code_file",
]


class CodeHashError(ValueError):
    """Reading an idea's files failed (bad path, bad commit, git missing)."""


def is_code_file(relpath: str) -> bool:
    """Whether a path relative to an idea folder is part of its code.

    Not code: anything under ``records/``, ``NOTES.md``, anything under ``__pycache__/`` and
    ``*.pyc`` / ``*.pyo``.
    """
    parts = PurePosixPath(relpath).parts
    if not parts:
        return False
    if parts[0] == "records" or "__pycache__" in parts:
        return False
    if parts == ("NOTES.md",):
        return False
    return not parts[-1].endswith((".pyc", ".pyo"))


def code_sha(files: Mapping[str, bytes]) -> str:
    """sha256 hex over the code files of an idea: sorted ``relpath NUL sha256(bytes) LF``.

    files: {posix path relative to the idea folder: bytes}; non-code paths
    (:func:`is_code_file`) are ignored, so passing every file of the folder is fine.
    """
    h = hashlib.sha256()
    for rel in sorted(p for p in files if is_code_file(p)):
        h.update(rel.encode("utf-8"))
        h.update(b"\0")
        h.update(hashlib.sha256(files[rel]).hexdigest().encode("ascii"))
        h.update(b"\n")
    return h.hexdigest()


def _tracked(idea_dir: Path) -> list[str] | None:
    """Paths (posix, relative to ``idea_dir``) that git tracks under it, or None when git is
    missing, ``idea_dir`` is not in a work tree, or git tracks nothing there."""
    try:
        proc = subprocess.run(
            ["git", "-C", str(idea_dir), "ls-files", "-z", "--", "."],
            capture_output=True,
            check=False,
        )
    except OSError:
        return None
    if proc.returncode != 0:
        return None
    found = [p for p in proc.stdout.decode("utf-8", errors="surrogateescape").split("\0") if p]
    return found or None


def idea_files_from_dir(idea_dir: Path) -> dict[str, bytes]:
    """{relpath: bytes} of the code files of ``idea_dir``, as ``code_sha`` hashes them.

    In a git checkout: the files git tracks in the folder, read from the working tree (a
    tracked file deleted from disk is left out; untracked files are ignored). Where git
    tracks nothing there: every regular file under it, as :func:`idea_files_all`.
    Raises CodeHashError when ``idea_dir`` is not a folder.
    """
    idea_dir = Path(idea_dir)
    if not idea_dir.is_dir():
        raise CodeHashError(f"{idea_dir} is not a folder")
    tracked = _tracked(idea_dir)
    if tracked is None:
        return idea_files_all(idea_dir)
    out: dict[str, bytes] = {}
    for rel in sorted(tracked):
        path = idea_dir / rel
        if is_code_file(rel) and path.is_file():
            out[rel] = path.read_bytes()
    return out


def idea_files_all(idea_dir: Path) -> dict[str, bytes]:
    """{relpath: bytes} of every code file under ``idea_dir`` (regular files, recursively),
    tracked by git or not: what Python can import from the folder.

    Raises CodeHashError when ``idea_dir`` is not a folder.
    """
    idea_dir = Path(idea_dir)
    if not idea_dir.is_dir():
        raise CodeHashError(f"{idea_dir} is not a folder")
    out: dict[str, bytes] = {}
    for path in sorted(idea_dir.rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(idea_dir).as_posix()
        if is_code_file(rel):
            out[rel] = path.read_bytes()
    return out


def _git(repo: Path, *args: str, input: bytes | None = None) -> bytes:
    try:
        proc = subprocess.run(
            ["git", "-C", str(repo), *args], input=input, capture_output=True, check=False
        )
    except FileNotFoundError as exc:
        raise CodeHashError("git is not installed") from exc
    if proc.returncode != 0:
        msg = proc.stderr.decode(errors="replace").strip().splitlines()
        raise CodeHashError(
            f"git {' '.join(args[:2])} failed: {msg[-1] if msg else proc.returncode}"
        )
    return proc.stdout


def idea_files_at_commit(repo: Path, commit: str, idea_relpath: str) -> dict[str, bytes]:
    """{relpath: bytes} of the code files of the idea folder ``idea_relpath`` (relative to the
    repository root, posix) in ``commit``'s tree, read with git ls-tree / cat-file.

    Raises CodeHashError when git fails or the folder is not in that tree.
    """
    idea_relpath = PurePosixPath(idea_relpath).as_posix().rstrip("/")
    listing = _git(Path(repo), "ls-tree", "-r", "-z", "--full-tree", commit, "--", idea_relpath)
    entries: list[tuple[str, str]] = []
    for item in listing.split(b"\0"):
        if not item:
            continue
        meta, _, path = item.partition(b"\t")
        _mode, kind, sha = meta.decode().split()
        if kind != "blob":
            continue
        full = path.decode("utf-8")
        rel = PurePosixPath(full).relative_to(idea_relpath).as_posix()
        if is_code_file(rel):
            entries.append((rel, sha))
    if not listing.strip(b"\0"):
        raise CodeHashError(f"{idea_relpath} is not in the tree of {commit}")
    out: dict[str, bytes] = {}
    if not entries:
        return out
    batch = _git(
        Path(repo), "cat-file", "--batch", input="".join(f"{s}\n" for _, s in entries).encode()
    )
    pos = 0
    for rel, sha in entries:
        nl = batch.index(b"\n", pos)
        header = batch[pos:nl].decode().split()
        if len(header) != 3 or header[0] != sha:
            raise CodeHashError(f"git cat-file: unexpected answer for {rel}: {' '.join(header)}")
        size = int(header[2])
        out[rel] = batch[nl + 1 : nl + 1 + size]
        pos = nl + 1 + size + 1
    return out


def harness_sha() -> str:
    """sha256 hex over the harness's own source: ``ladder/*.py`` (not the kernels), as
    :func:`code_sha` over {file name: bytes}."""
    pkg = Path(__file__).resolve().parent
    return code_sha({p.name: p.read_bytes() for p in sorted(pkg.glob("*.py"))})


def idea_files_in_history(idea_dir: Path, commit: str) -> dict[str, bytes]:
    """{relpath: bytes} of the code files of ``idea_dir`` (a folder in a git work tree) in
    ``commit``'s tree. Raises CodeHashError when the folder is not in a work tree, the commit
    is unknown there, or the folder is not in its tree."""
    idea_dir = Path(idea_dir).resolve()
    top = Path(_git(idea_dir, "rev-parse", "--show-toplevel").decode().strip()).resolve()
    rel = idea_dir.relative_to(top).as_posix()
    return idea_files_at_commit(top, commit, rel)


def diff_files(before: Mapping[str, bytes], after: Mapping[str, bytes]) -> list[str]:
    """What changed between two ``{relpath: bytes}`` maps of code files, one item per file
    in path order: ``"<path> changed"``, ``"<path> added"`` or ``"<path> removed"``."""
    old = {p: v for p, v in before.items() if is_code_file(p)}
    new = {p: v for p, v in after.items() if is_code_file(p)}
    out = []
    for rel in sorted(set(old) | set(new)):
        if rel not in new:
            out.append(f"{rel} removed")
        elif rel not in old:
            out.append(f"{rel} added")
        elif old[rel] != new[rel]:
            out.append(f"{rel} changed")
    return out
