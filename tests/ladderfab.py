"""Synthetic ladders in temporary git repositories, for the vendor and drift tests.

A :class:`FakeLadder` is a git repository with the real repository's ``pyproject.toml``, a
minimal ``ladder/kernels/<family>/family.py`` (FAMILY, ENTRY_POINTS, VENDOR, TARGET_DEVICE),
idea folders, committed bench records that pass ``ladder.records.validate_record``, and an
empty ``package/src/kernel_fun/<family>/``. The vendor and drift CLIs run in-process on it
through ``--repo``.

``vl`` (tools/vendorlib), ``vendor`` and ``drift`` are re-exported for the tests, which
cannot import them before this module has put tools/ on sys.path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "tools") not in sys.path:
    sys.path.insert(0, str(REPO / "tools"))

import drift  # noqa: E402
import vendor  # noqa: E402
import vendorlib as vl  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from ladder.codehash import code_sha, idea_files_from_dir  # noqa: E402
from ladder.records import VERSION_KEYS, validate_record  # noqa: E402

_ENV = {
    "GIT_AUTHOR_NAME": "ladder",
    "GIT_AUTHOR_EMAIL": "ladder@example.invalid",
    "GIT_COMMITTER_NAME": "ladder",
    "GIT_COMMITTER_EMAIL": "ladder@example.invalid",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


@dataclass
class CliResult:
    """Exit code and the two streams of one in-process CLI run."""

    code: int
    stdout: str
    stderr: str


def _timing(cand_ms: float, base_ms: float, full: bool) -> dict[str, Any]:
    def stats(m: float) -> dict[str, Any]:
        return {"median": m, "p20": m * 0.98, "p80": m * 1.02, "n": 20}

    out: dict[str, Any] = {
        "candidate_ms": stats(cand_ms),
        "baseline_ms": stats(base_ms),
        "ratio": base_ms / cand_ms,
    }
    if full:
        out["min_bytes"] = 1 << 20
        out["fraction_of_copy"] = 0.5
    return out


def make_record(
    family: str,
    idea: str,
    code: str,
    *,
    knobs: dict[str, Any],
    serial: int,
    ratio: float = 1.5,
    status: str = "passed",
    dirty: bool = False,
    device: str = "NVIDIA H200",
    commit: str = "0" * 40,
) -> dict[str, Any]:
    """A schema-valid record; ``serial`` orders creation time and makes the record_id."""
    record_id = f"20260101T{serial:06d}Z-{serial:06x}"
    shape: dict[str, Any] = {
        "name": "prod",
        "B": 16,
        "T": 8192,
        "D": 2048,
        "W": 4,
        "x_dtype": "bfloat16",
        "w_dtype": "float32",
        "correctness": {
            "candidate_err": {"y": 1e-3},
            "baseline_err": {"y": 1e-3},
            "err_ratio": {"y": 1.0},
            "passed": status != "incorrect",
        },
    }
    if status == "passed":
        shape["fwd"] = _timing(1.0, ratio, True)
        shape["bwd"] = _timing(2.0, 2.0 * ratio, True)
        shape["fwdbwd"] = _timing(3.0, 3.0 * ratio, False)
    rec = {
        "schema_version": 1,
        "record_id": record_id,
        "family": family,
        "idea": idea,
        "created": f"2026-01-01T{serial // 3600 % 24:02d}:{serial // 60 % 60:02d}:"
        f"{serial % 60:02d}Z",
        "commit": commit,
        "dirty": dirty,
        "commit_source": "git",
        "code_sha": code,
        "code_unchanged_since": record_id,
        "harness_sha": "1" * 64,
        "device": {"name": device, "capability": "9.0", "driver": "570.00"},
        "versions": {k: "0" for k in VERSION_KEYS},
        "knobs": knobs,
        "clocks": {"start": {}, "end": {}},
        "status": status,
        "error": "boom" if status == "error" else None,
        "copy_ceiling_TBps": 4.0,
        "shapes": [shape],
    }
    validate_record(rec)
    return rec


class FakeLadder:
    """A throwaway repository laid out like this one (see the module docstring)."""

    def __init__(
        self,
        root: Path,
        family: str = "toy",
        *,
        modules: dict[str, dict[str, str]] | None = None,
        entry_points: tuple[str, ...] = ("toy_fwd", "toy_bwd"),
    ) -> None:
        self.root = root
        self.family = family
        self.entry_points = entry_points
        self._serial = 0
        root.mkdir(parents=True, exist_ok=True)
        self.git("init", "-q", "-b", "main")
        self.write("pyproject.toml", (REPO / "pyproject.toml").read_text())
        self.write(".gitignore", "__pycache__/\n*.pyc\n")
        self.set_family(modules or {"001-first": {"kernel": "first"}})
        self.write(f"package/src/kernel_fun/{family}/__init__.py", '"""A family."""\n')

    # -- files and git -------------------------------------------------------------------
    def git(self, *args: str) -> str:
        env = {**os.environ, **_ENV}
        proc = subprocess.run(
            ["git", "-C", str(self.root), *args], capture_output=True, text=True, env=env
        )
        if proc.returncode != 0:
            raise RuntimeError(f"git {' '.join(args)}: {proc.stderr.strip()}")
        return proc.stdout.strip()

    def write(self, relpath: str, text: str) -> Path:
        path = self.root / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def read(self, relpath: str) -> bytes:
        return (self.root / relpath).read_bytes()

    def commit(self, message: str = "change") -> str:
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", message)
        return self.git("rev-parse", "HEAD")

    # -- ladder pieces -------------------------------------------------------------------
    @property
    def ideas(self) -> str:
        return f"ladder/kernels/{self.family}/ideas"

    @property
    def package(self) -> str:
        return f"package/src/kernel_fun/{self.family}"

    def set_family(self, modules: dict[str, dict[str, str]]) -> None:
        vendor = {"package": f"kernel_fun.{self.family}", "modules": modules}
        self.write(
            f"ladder/kernels/{self.family}/family.py",
            f'"""The {self.family} family (test fixture)."""\n\n'
            f"FAMILY = {self.family!r}\n"
            f"ENTRY_POINTS = {self.entry_points!r}\n"
            'TARGET_DEVICE = "H200"\n'
            f"VENDOR = {vendor!r}\n",
        )

    def add_idea(self, folder: str, files: dict[str, str]) -> None:
        """Write an idea folder's modules (dedented) and a NOTES.md."""
        for name, text in files.items():
            self.write(f"{self.ideas}/{folder}/{name}", textwrap.dedent(text).lstrip("\n"))
        self.write(f"{self.ideas}/{folder}/NOTES.md", f"# {folder}\n")

    def code_sha(self, folder: str) -> str:
        return code_sha(idea_files_from_dir(self.root / self.ideas / folder))

    def add_record(self, folder: str, knobs: dict[str, Any] | None = None, **kw: Any) -> str:
        """Write a record of the idea's current working-tree code; returns its record_id."""
        self._serial += 1
        rec = make_record(
            self.family,
            folder,
            kw.pop("code", None) or self.code_sha(folder),
            knobs=knobs or {},
            serial=self._serial,
            **kw,
        )
        self.write(
            f"{self.ideas}/{folder}/records/{rec['record_id']}.json", json.dumps(rec, indent=2)
        )
        return rec["record_id"]

    # -- the tools -----------------------------------------------------------------------
    def vendor(self, *args: str) -> CliResult:
        return _invoke(vendor.app, [self.family, "--repo", str(self.root), *args])

    def drift(self, *args: str) -> CliResult:
        return _invoke(drift.app, ["--repo", str(self.root), *args])

    def package_bytes(self) -> dict[str, bytes]:
        """Every file under the family's package folder (no bytecode)."""
        base = self.root / self.package
        return {
            p.relative_to(self.root).as_posix(): p.read_bytes()
            for p in sorted(base.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts
        }


# The smallest toy idea with one int knob (TOY_K), for vendor and drift tests.
PLAIN = """
import os

K = int(os.environ.get("TOY_K", "1"))


def toy_fwd(x):
    return x + K


def toy_bwd(x):
    return x
"""

__all__ = ["PLAIN", "CliResult", "FakeLadder", "drift", "invoke", "make_record", "vendor", "vl"]


def invoke(app: Any, args: list[str]) -> CliResult:
    """Run a typer app in-process; the exit code, stdout and stderr."""
    return _invoke(app, args)


def _invoke(app: Any, args: list[str]) -> CliResult:
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    return CliResult(result.exit_code, result.stdout, result.stderr)
