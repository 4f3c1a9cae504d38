"""Writing the package: every file or none, and what is on disk now (for diffs and checks)."""

from __future__ import annotations

import difflib
import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from .common import VendorError
from .spec import FamilySpec


def current_outputs(repo: Path, spec: FamilySpec) -> dict[str, bytes]:
    """{repo-relative path: bytes} of the files vendor owns, as they are on disk now
    (``_kernels/**`` except ``__pycache__/``, and ``_provenance.py``). A ``.pyc`` outside
    ``__pycache__`` counts: Python imports it when no ``.py`` of that name exists."""
    out: dict[str, bytes] = {}
    kdir = repo / spec.kernels_dir
    if kdir.is_dir():
        for path in sorted(kdir.rglob("*")):
            rel = path.relative_to(repo).as_posix()
            if path.is_file() and "__pycache__" not in path.relative_to(kdir).parts:
                out[rel] = path.read_bytes()
    prov = repo / spec.provenance_path
    if prov.is_file():
        out[spec.provenance_path] = prov.read_bytes()
    return out


def unified_diff(old: Mapping[str, bytes], new: Mapping[str, bytes]) -> str:
    """A unified diff from the files ``old`` to the files ``new`` (text, '' if equal)."""
    chunks: list[str] = []
    for path in sorted(set(old) | set(new)):
        a = old.get(path)
        b = new.get(path)
        if a == b:
            continue
        a_lines = a.decode("utf-8", "replace").splitlines(keepends=True) if a is not None else []
        b_lines = b.decode("utf-8", "replace").splitlines(keepends=True) if b is not None else []
        chunks.extend(
            difflib.unified_diff(
                a_lines,
                b_lines,
                fromfile=f"a/{path}" if a is not None else "/dev/null",
                tofile=f"b/{path}" if b is not None else "/dev/null",
            )
        )
    return "".join(chunks)


STAGING_PREFIX = ".vendor-"
# tempfile.mkdtemp(prefix=STAGING_PREFIX): eight characters of its random name alphabet.
_OWN_STAGING = re.compile(r"^\.vendor-[a-z0-9_]{8}$")


def staging_leftovers(repo: Path, spec: FamilySpec) -> list[str]:
    """Repo-relative paths of ``.vendor-*`` entries in the family's package folder: staging
    folders a vendor run killed outright (no ``finally``) left behind. Sorted."""
    pkg = repo / spec.package_dir
    if not pkg.is_dir():
        return []
    return sorted(
        p.relative_to(repo).as_posix() for p in pkg.iterdir() if p.name.startswith(STAGING_PREFIX)
    )


def remove_stale_staging(repo: Path, spec: FamilySpec) -> list[str]:
    """Delete the staging folders of the vendor's own naming (``.vendor-`` and eight
    characters, a real folder, not a link) from the package folder; the paths removed."""
    removed: list[str] = []
    for rel in staging_leftovers(repo, spec):
        path = repo / rel
        if _OWN_STAGING.match(path.name) and path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
            removed.append(rel)
    return removed


def write_outputs(repo: Path, spec: FamilySpec, outputs: Mapping[str, bytes]) -> None:
    """Replace ``_kernels/`` and ``_provenance.py`` with ``outputs``: every file or none.

    The new tree is written to a staging folder beside the package first; then the old
    ``_kernels`` and ``_provenance.py`` are moved aside and the new ones moved in (renames on
    one file system). Any failure moves the old ones back, leaving the package untouched.
    Staging folders left by an earlier run that was killed outright are removed first.
    """
    kernels = repo / spec.kernels_dir
    prov = repo / spec.provenance_path
    for rel in outputs:
        if rel != spec.provenance_path and not rel.startswith(spec.kernels_dir + "/"):
            raise VendorError(f"refusing to write {rel}: outside {spec.kernels_dir}/")
    pkg = repo / spec.package_dir
    pkg.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(repo, spec)
    staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=pkg))
    done: list[tuple[Path, Path]] = []  # (moved from, moved to), to undo in reverse
    try:
        new_kernels = staging / "new" / "_kernels"
        new_kernels.mkdir(parents=True)
        new_prov = staging / "new" / "_provenance.py"
        for rel, data in outputs.items():
            target = (
                new_prov
                if rel == spec.provenance_path
                else (new_kernels / PurePosixPath(rel).relative_to(spec.kernels_dir))
            )
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        old = staging / "old"
        old.mkdir()
        moves: list[tuple[Path, Path]] = []
        if kernels.exists():
            moves.append((kernels, old / "_kernels"))
        moves.append((new_kernels, kernels))
        if prov.exists():
            moves.append((prov, old / "_provenance.py"))
        if new_prov.exists():
            moves.append((new_prov, prov))
        try:
            for src, dst in moves:
                os.replace(src, dst)
                done.append((src, dst))
        except BaseException:
            for src, dst in reversed(done):
                os.replace(dst, src)
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
