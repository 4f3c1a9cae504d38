"""The --out check the measuring tools (prodtime.py, fsdp2_kda.py, kda_fla_configs.py) share:
refuse a report path that cannot be written before minutes of GPU work, not after."""

from __future__ import annotations

import os
from pathlib import Path


def out_problem(out: Path, example: str) -> str | None:
    """Why `out` cannot be written as a file (creating its folder if missing), or None.
    `example` is a file name to suggest when `out` is a folder."""
    if out.is_dir():
        return f"--out {out} is a folder; give a file name, e.g. {out / example}"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"--out {out}: cannot create its folder {out.parent} ({exc.strerror or exc})"
    if not os.access(out.parent, os.W_OK):
        return f"--out {out}: the folder {out.parent} is not writable"
    return None
