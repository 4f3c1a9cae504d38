"""Formatting: every generated file goes through ``ruff format`` under the commit's config."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

from .common import VendorError


def format_python(code: str, relpath: str, pyproject: bytes | None) -> bytes:
    """``ruff format`` of generated code (stdin), under ``pyproject`` (the commit's
    pyproject.toml; ruff's defaults when None). Raises VendorError when ruff is missing or
    rejects the code."""
    if importlib.util.find_spec("ruff") is None:
        raise VendorError(
            f"ruff is not installed for {sys.executable}; the vendor formats its output with it "
            "(run `make setup`)"
        )
    with tempfile.TemporaryDirectory(prefix="vendor-ruff-") as tmp:
        args = [sys.executable, "-m", "ruff", "format", "--stdin-filename", relpath]
        if pyproject is not None:
            cfg = Path(tmp) / "pyproject.toml"
            cfg.write_bytes(pyproject)
            args += ["--config", str(cfg)]
        else:
            args += ["--isolated"]
        proc = subprocess.run(
            [*args, "-"], input=code.encode("utf-8"), capture_output=True, cwd=tmp, check=False
        )
    if proc.returncode != 0:
        msg = proc.stderr.decode(errors="replace").strip().splitlines()
        raise VendorError(f"ruff format rejected {relpath}: {msg[-1] if msg else proc.returncode}")
    out = proc.stdout
    try:
        ast.parse(out)
    except SyntaxError as exc:  # pragma: no cover - ruff only emits valid code
        raise VendorError(f"{relpath}:{exc.lineno}: generated code does not parse") from None
    return out
