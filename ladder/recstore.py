"""Bench records on disk: written once or not at all (a rescue file otherwise), read back
validated, and listed per idea and per family, oldest first (docs/DESIGN.md "Bench records").
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

from ladder import paths
from ladder.recschema import RecordError, validate_record

__all__ = [
    "RESCUE_DIR_ENV",
    "TEMP_PREFIX",
    "TEMP_SUFFIX",
    "RecordNotWritten",
    "code_unchanged_since",
    "created_at",
    "ensure_records_dir",
    "load_idea_records",
    "load_records",
    "read_record",
    "rescue_record",
    "write_new_file",
    "write_record",
]


def _clean(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items() if not (isinstance(k, str) and k[:1] == "_")}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


TEMP_PREFIX = ".rec-"
TEMP_SUFFIX = ".tmp"


class RecordNotWritten(RecordError):
    """A finished measurement could not be written where it belongs; the message says why and
    where it was saved instead (exit 1: the run happened, its result is not in records/)."""

    exit_code = 1


RESCUE_DIR_ENV = "LADDER_RESCUE_DIR"


def rescue_record(rec: dict, why: str) -> RecordNotWritten:
    """Save a record that could not be written where it belongs, and return the error to raise.

    The record (private keys dropped; nan/inf kept as JSON's NaN/Infinity, anything else not
    JSON as its string) goes to ``$LADDER_RESCUE_DIR`` (default: the system's temporary
    folder) as ``ladder-rescue-<family>-<record_id>.json``, created exclusively. When even
    that fails, the JSON is printed on stderr. The returned error's message is one line:
    ``why``, then where the measurement is.
    """
    import sys

    rid = str(rec.get("record_id") or "unknown") if isinstance(rec, dict) else "unknown"
    fam = str(rec.get("family") or "unknown") if isinstance(rec, dict) else "unknown"
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", f"ladder-rescue-{fam}-{rid}")
    try:
        text = json.dumps(_clean(rec), indent=2, allow_nan=True, default=str) + "\n"
    except (TypeError, ValueError, RecursionError):
        text = repr(rec) + "\n"
    folder = Path(os.environ.get(RESCUE_DIR_ENV) or tempfile.gettempdir())
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path, n = folder / f"{safe}.json", 1
        while True:
            try:
                with open(path, "x", encoding="utf-8") as fh:
                    fh.write(text)
                break
            except FileExistsError:
                n += 1
                path = folder / f"{safe}-{n}.json"
        where = f"the measurement is saved in {path}"
    except OSError:
        sys.stderr.write(text)
        sys.stderr.flush()
        where = "the measurement is printed above as JSON"
    return RecordNotWritten(f"record not written: {why}; {where}")


def write_record(idea_dir: Path, rec: dict, *, records_dir: Path | None = None) -> Path:
    """Validate ``rec`` and create ``<records_dir>/<record_id>.json`` (default records_dir:
    ``idea_dir/records``, created if missing), never overwriting and never half-written.

    A record that cannot be written there (invalid, the name taken, the folder not writable,
    a value JSON cannot hold) is never lost: :func:`rescue_record` saves it elsewhere and
    RecordNotWritten (a RecordError, exit 1) says why and where.

    The JSON goes first to a hidden temporary file ``.rec-*.tmp`` in the same folder (same
    file system, so the final step is atomic), which is then hard-linked to the final name
    (fails if it exists) and removed. A process killed outright between the two steps can
    leave that temporary file behind; the repository's .gitignore covers ``.rec-*.tmp`` so
    it never dirties the tree, and nothing reads it (records are ``*.json``). On a file
    system without hard links the temporary file is renamed onto the final name instead,
    after checking that the name is free.

    Returns the path. Raises RecordNotWritten (one line, naming the path and the rescue file)
    when the record is invalid, the file exists, or the folder cannot be created or written.
    """
    try:
        return _write_new(idea_dir, rec, records_dir)
    except RecordError as exc:
        raise rescue_record(rec, str(exc)) from None
    except (TypeError, ValueError) as exc:  # a value JSON cannot hold
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise rescue_record(rec, f"cannot encode it as JSON: {reason}") from None


def _write_new(idea_dir: Path, rec: dict, records_dir: Path | None) -> Path:
    validate_record(rec)
    out_dir = Path(records_dir) if records_dir is not None else Path(idea_dir) / "records"
    final = out_dir / f"{rec['record_id']}.json"
    text = json.dumps(_clean(rec), indent=2, sort_keys=False, allow_nan=False) + "\n"
    out_dir = ensure_records_dir(out_dir)
    try:
        write_new_file(final, text)
    except FileExistsError:
        raise RecordError(
            f"{final} exists; records are never rewritten (bench again for a new record_id)"
        ) from None
    except _TempNotCreated as exc:
        raise RecordError(f"cannot write a record in {out_dir}: {exc}") from None
    except OSError as exc:
        raise RecordError(f"cannot write {final}: {_os_reason(exc)}") from None
    return final


class _TempNotCreated(OSError):
    """The temporary file beside the target could not be created (the folder's fault)."""


def write_new_file(final: Path, text: str, prefix: str = TEMP_PREFIX) -> None:
    """Write `text` to `final`, whole or not at all, and never over anything already there:
    through a temporary file in the same folder (fsynced), hard-linked into place (renamed
    where the file system has no hard links). Raises FileExistsError when something is at
    `final` (then nothing changed), OSError for any other failure (no temporary file left)."""
    final = Path(final)
    try:
        fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=TEMP_SUFFIX, dir=final.parent)
    except OSError as exc:
        raise _TempNotCreated(_os_reason(exc)) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, final)
        except FileExistsError:
            raise
        except OSError:
            # A file system without hard links: rename the complete file into place.
            if os.path.lexists(final):
                raise FileExistsError(f"{final} exists") from None
            os.replace(tmp, final)
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


def _os_reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def ensure_records_dir(path: Path) -> Path:
    """Create ``path`` (and its parents) if missing and prove that a record can be written
    there by creating and removing a temporary file. Returns the path.

    Raises RecordError (one line) when ``path`` or a parent is a file, or the folder cannot
    be created or written. ``ladder bench`` calls it before measuring, so a bad ``--out``
    fails in a second, not after the whole run.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise RecordError(f"{path} is a file, not a folder; pass a folder for the records")
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=TEMP_SUFFIX, dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        where = f"{path}" if exc.filename in (None, str(path)) else f"{path} ({exc.filename})"
        raise RecordError(
            f"cannot write records in {where}: {_os_reason(exc)}; pick a writable folder"
        ) from None
    return path


def read_record(path: Path) -> dict:
    """Read and validate one record file (adds ``_path``). Raises RecordError naming the
    file: unreadable, not JSON, nested too deeply to parse, not a JSON object, or invalid."""
    try:
        rec = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise RecordError(f"{path}: not a readable JSON record: {reason}") from None
    except RecursionError:
        raise RecordError(f"{path}: not a readable JSON record: nested too deeply") from None
    if not isinstance(rec, dict):
        raise RecordError(f"{path}: expected a JSON object, got {type(rec).__name__}")
    rec["_path"] = path
    validate_record(rec)
    if rec["record_id"] != Path(path).stem:
        raise RecordError(f"{path}: record_id: {rec['record_id']!r} does not match the file name")
    return rec


def load_idea_records(idea_dir: Path) -> list[dict]:
    """The validated records of one idea folder, oldest first (created, then record_id),
    each with ``_path``. Raises RecordError on the first bad file, including a record whose
    ``idea`` is not this folder's full name."""
    rdir = Path(idea_dir) / "records"
    if not rdir.is_dir():
        return []
    folder = Path(idea_dir).name
    recs = [read_record(p) for p in sorted(rdir.glob("*.json"))]
    for rec in recs:
        if rec["idea"] != folder:
            raise RecordError(f"{rec['_path']}: idea: {rec['idea']!r} does not belong in {folder}")
    return sorted(recs, key=_age_key)


def load_records(family: str, root: Path | None = None) -> list[dict]:
    """Every validated record of a family's ideas, oldest first, each with ``_path``.

    Raises UnknownFamily, or RecordError naming the file and field of the first bad record.
    """
    out: list[dict] = []
    fdir = paths.family_dir(family, root)
    for folder in paths.list_ideas(family, root):
        for rec in load_idea_records(fdir / "ideas" / folder):
            if rec["family"] != family:
                raise RecordError(f"{rec['_path']}: family: {rec['family']!r} is not {family!r}")
            out.append(rec)
    return sorted(out, key=_age_key)


def created_at(rec: dict) -> datetime:
    """A record's ``created`` as an aware datetime (UTC)."""
    return datetime.fromisoformat(rec["created"].replace("Z", "+00:00"))


def _age_key(rec: dict) -> tuple[datetime, str]:
    return (created_at(rec), rec["record_id"])


def code_unchanged_since(idea_dir: Path, code_sha: str, record_id: str) -> str:
    """The record_id of the oldest existing record of the idea with this code_sha, or
    ``record_id`` (the new record's own) when there is none."""
    same = [r for r in load_idea_records(idea_dir) if r["code_sha"] == code_sha]
    return same[0]["record_id"] if same else record_id
