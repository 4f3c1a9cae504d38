"""Git reads: every input of the vendor comes from git objects at one commit.

Nothing here looks at the working tree except :func:`dirty_paths` (which asks git what is
uncommitted) and :func:`is_shallow`. Failures are :class:`VendorError` with git's last line.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from .common import VendorError


def git(repo: Path, *args: str, input: bytes | None = None, check: bool = True) -> bytes:
    """Run ``git -C repo args`` and return stdout. Raises VendorError when it fails."""
    try:
        proc = subprocess.run(
            ["git", "-C", str(repo), *args], input=input, capture_output=True, check=False
        )
    except FileNotFoundError as exc:
        raise VendorError("git is not installed; install git") from exc
    if check and proc.returncode != 0:
        lines = proc.stderr.decode(errors="replace").strip().splitlines()
        raise VendorError(f"git {' '.join(args[:3])}: {lines[-1] if lines else proc.returncode}")
    return proc.stdout


def check_repo(repo: Path) -> None:
    """Raise VendorError, naming the --repo option that gave it, when ``repo`` does not exist,
    is a file, or is not in a git repository. Called once by each tool's entry point."""
    if not repo.exists():
        raise VendorError(f"--repo {repo} does not exist; give the repository's root folder")
    if not repo.is_dir():
        raise VendorError(f"--repo {repo} is a file, not a folder; give the repository's root")
    inside = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--is-inside-work-tree"],
        capture_output=True,
        check=False,
    )
    if inside.returncode != 0:
        raise VendorError(f"{repo} is not in a git repository; give the repository's root folder")


def resolve_commit(repo: Path, rev: str) -> str:
    """The full sha of ``rev`` (a commit). Raises VendorError when it is not a local commit."""
    proc = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
        capture_output=True,
        check=False,
    )
    if proc.returncode != 0:
        raise VendorError(
            f"{rev!r} is not a commit of {repo}; pass a commit sha or ref (a shallow clone "
            "needs `git fetch --unshallow`)"
        )
    return proc.stdout.decode().strip()


def read_blob(repo: Path, commit: str, path: str) -> bytes | None:
    """The bytes of ``path`` (repo-relative, posix) in ``commit``'s tree, or None if absent."""
    proc = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "blob", f"{commit}:{path}"],
        capture_output=True,
        check=False,
    )
    return proc.stdout if proc.returncode == 0 else None


def list_tree(repo: Path, commit: str, folder: str) -> list[tuple[str, str]]:
    """[(name, "blob"|"tree")] directly under ``folder`` in ``commit``'s tree (sorted)."""
    out = git(repo, "ls-tree", "-z", "--full-tree", commit, "--", folder.rstrip("/") + "/")
    entries: list[tuple[str, str]] = []
    for item in out.split(b"\0"):
        if not item:
            continue
        meta, _, path = item.partition(b"\t")
        entries.append((PurePosixPath(path.decode("utf-8")).name, meta.split()[1].decode()))
    return sorted(entries)


def dirty_paths(repo: Path, paths: Iterable[str]) -> list[str]:
    """Paths (repo-relative) under ``paths`` with uncommitted changes or untracked files."""
    paths = list(paths)
    if not paths:
        return []
    out = git(repo, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--", *paths)
    found: list[str] = []
    items = out.split(b"\0")
    i = 0
    while i < len(items):
        item = items[i]
        i += 1
        if not item:
            continue
        status, path = item[:2].decode(), item[3:].decode("utf-8")
        if status[0] in "RC":  # a rename carries the old path as the next item
            i += 1
        found.append(path)
    return sorted(set(found))


def sha256(data: bytes) -> str:
    """sha256 hex of bytes."""
    return hashlib.sha256(data).hexdigest()


def is_shallow(repo: Path) -> bool:
    """True when ``repo`` is a shallow clone (its history is cut off)."""
    out = git(repo, "rev-parse", "--is-shallow-repository", check=False)
    return out.strip() == b"true"
