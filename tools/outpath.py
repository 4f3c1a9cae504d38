"""The --out handling the measuring tools share: refuse a report path that cannot be written
before minutes of GPU work, not after; write a report so that nothing is lost or half-written.

``write_report`` writes through a temporary file in the report's folder and renames it into
place, so a crash leaves the earlier file or the whole new one, never a truncated one. A
file already at the path when this process first writes there (an earlier run's report, a
committed result) is kept beside it as ``<stem>.prev-<its mtime>[-n]<suffix>``, and the
tool says so on stderr; later writes of the same process to the same path (a report saved
as it grows) replace what that process wrote.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["out_problem", "write_report"]

_WRITTEN: set[Path] = set()  # paths this process has written a report to


def out_problem(out: Path, example: str, option: str = "--out") -> str | None:
    """Why `out` cannot be written as a file (creating its folder if missing), or None.
    `example` is a file name to suggest when `out` is a folder; `option` names the option
    that gave the path in the message."""
    if out.is_dir():
        return f"{option} {out} is a folder; give a file name, e.g. {out / example}"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"{option} {out}: cannot create its folder {out.parent} ({exc.strerror or exc})"
    if not os.access(out.parent, os.W_OK):
        return f"{option} {out}: the folder {out.parent} is not writable"
    return None


def _keep_aside(out: Path) -> Path:
    """Hard-link the existing file at `out` to a free ``<stem>.prev-<mtime>[-n]<suffix>``
    name beside it (a link never replaces a file that exists) and return that name."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime(out.stat().st_mtime))
    n = 0
    while True:
        tail = "" if n == 0 else f"-{n}"
        aside = out.with_name(f"{out.stem}.prev-{stamp}{tail}{out.suffix}")
        try:
            os.link(out, aside)
            return aside
        except FileExistsError:
            n += 1


def write_report(out: Path, text: str) -> Path | None:
    """Write `text` to `out` (folders created) as the module docstring says. Returns where an
    earlier file at `out` was kept, or None. OSError propagates (the earlier file, if any,
    then still stands at `out`)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    key = out.resolve()
    kept = None
    if key not in _WRITTEN and out.exists():
        kept = _keep_aside(out)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        if kept is not None:
            kept.unlink(missing_ok=True)  # `out` still holds the earlier file
        raise
    _WRITTEN.add(key)
    if kept is not None:
        print(f"{out} existed: the earlier file is kept as {kept}", file=sys.stderr)
    return kept
