"""Content hashes: an idea's code (``code_sha``) and the harness's own source (``harness_sha``).

``code_sha`` is a sha256 over the sorted ``(relpath, sha256(bytes))`` pairs of an idea
folder's code files, so it depends only on the bytes and the posix paths relative to the
folder: the same from a working tree, a clone or a commit's tree. Records, NOTES.md and
bytecode are not code.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

__all__ = [
    "CodeHashError",
    "code_sha",
    "harness_sha",
    "idea_files_at_commit",
    "idea_files_from_dir",
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


def idea_files_from_dir(idea_dir: Path) -> dict[str, bytes]:
    """{relpath: bytes} of the code files under ``idea_dir`` (regular files, recursively).

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
