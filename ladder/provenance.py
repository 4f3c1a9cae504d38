"""Where a bench record came from: the git state of the checkout, the installed versions and
the GPU as nvidia-smi sees it (docs/DESIGN.md "Bench records": commit, dirty, versions,
device, clocks).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from ladder import paths
from ladder.paths import LadderError

__all__ = ["CLOCK_FIELDS", "GitState", "git_state", "nvidia_smi", "versions"]


@dataclass
class GitState:
    """commit (40 hex or None), dirty, and where they came from: "git", "env" or "none"."""

    commit: str | None
    dirty: bool
    source: str
    changed: list[str] = field(default_factory=list)


def _git(root: Path, *args: str) -> str | None:
    if shutil.which("git") is None:
        return None
    try:
        proc = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, check=False
        )
    except OSError:
        return None
    return proc.stdout if proc.returncode == 0 else None


def _is_new_record(path: str) -> bool:
    """Whether a repository path lies under ``.../ideas/<NNN-slug>/records/``."""
    parts = path.split("/")
    return any(
        parts[i] == "ideas" and paths.IDEA_RE.match(parts[i + 1]) and parts[i + 2] == "records"
        for i in range(len(parts) - 3)
    )


def _dirt(porcelain_z: str) -> list[str]:
    """The paths that make a tree dirty, from ``git status --porcelain -z``: every entry
    but an untracked file under an idea's records/."""
    out: list[str] = []
    items = porcelain_z.split("\0")
    i = 0
    while i < len(items):
        item = items[i]
        i += 1
        if len(item) < 4:
            continue
        code, path = item[:2], item[3:]
        if code[0] in "RC":
            i += 1  # the entry after a rename or copy is its source path
        if code == "??" and _is_new_record(path):
            continue
        out.append(path)
    return out


def git_state(root: Path, *, allow_dirty: bool, environ: dict[str, str] | None = None) -> GitState:
    """The commit benched and whether the tree is dirty.

    From git (``rev-parse HEAD``, ``status --porcelain``) when ``root`` is in a repository,
    else from LADDER_COMMIT / LADDER_DIRTY ("0"/"1"/"true"/"false"). New, untracked files
    under an idea's ``records/`` are not dirt (the records of an earlier bench, e.g. the
    points of a knob sweep, awaiting their commit); a modified or deleted tracked record is.
    Raises LadderError when neither is available (unless allow_dirty: then commit None,
    dirty True) and when the tree is dirty without allow_dirty.
    """
    env = os.environ if environ is None else environ
    head = _git(root, "rev-parse", "HEAD")
    status = (
        _git(root, "status", "--porcelain", "-z", "--untracked-files=all")
        if head is not None
        else None
    )
    if head is not None and status is not None:
        changed = _dirt(status)
        state = GitState(head.strip(), bool(changed), "git", changed)
    elif env.get("LADDER_COMMIT"):
        commit = env["LADDER_COMMIT"].strip().lower()
        if len(commit) != 40 or any(c not in "0123456789abcdef" for c in commit):
            raise LadderError(f"LADDER_COMMIT={commit!r} is not a full 40-hex commit sha; fix it")
        raw = env.get("LADDER_DIRTY", "").strip().lower()
        if raw not in ("0", "1", "true", "false"):
            raise LadderError(f"LADDER_DIRTY={raw!r}: set it to 0 or 1 along with LADDER_COMMIT")
        state = GitState(commit, raw in ("1", "true"), "env")
    else:
        if not allow_dirty:
            raise LadderError(
                f"cannot tell which commit is benched: no git repository at {root} and "
                f"LADDER_COMMIT/LADDER_DIRTY are unset; set them, or pass --allow-dirty "
                f"(the record can never win)"
            )
        return GitState(None, True, "none")
    if state.dirty and not allow_dirty:
        some = ", ".join(state.changed[:3]) or "LADDER_DIRTY=1"
        raise LadderError(
            f"the working tree has uncommitted changes ({some}); commit them first, or pass "
            f"--allow-dirty for a record that can never win"
        )
    return state


def _dist_version(*names: str) -> str:
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return "not installed"


def versions() -> dict[str, str]:
    """Versions of the stack (``"not installed"`` where missing): torch, triton, fla,
    cutlass, cuda-python, python, kernel_fun."""
    out = {
        "torch": _dist_version("torch"),
        "triton": _dist_version("triton", "pytorch-triton"),
        "fla": _dist_version("fla-core", "flash-linear-attention"),
        "cutlass": _dist_version("nvidia-cutlass-dsl"),
        "cuda-python": _dist_version("cuda-python", "cuda-bindings"),
        "python": platform.python_version(),
        "kernel_fun": _dist_version("kernel-fun"),
    }
    if out["kernel_fun"] == "not installed":
        try:
            import kernel_fun

            out["kernel_fun"] = str(kernel_fun.__version__)
        except Exception:
            pass
    return out


def nvidia_smi(fields: list[str], device_id: str | None) -> dict[str, str]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return {}
    for sel in ([device_id] if device_id else []) + [None]:
        cmd = [exe, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]
        if sel:
            cmd += ["-i", sel]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return {}
        lines = proc.stdout.strip().splitlines()
        if proc.returncode == 0 and lines:
            values = [v.strip() for v in lines[0].split(",")]
            if len(values) == len(fields):
                return dict(zip(fields, values, strict=True))
    return {}


CLOCK_FIELDS = [
    "clocks.sm",
    "clocks.mem",
    "clocks.max.sm",
    "clocks.max.mem",
    "temperature.gpu",
    "power.draw",
]
