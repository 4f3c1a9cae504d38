"""Bench records: schema, validation, append-only writing, loading, and the winner.

A record is one JSON file ``ideas/NNN-slug/records/<record_id>.json`` (docs/DESIGN.md "Bench
records", schema_version 1). Fields beyond docs/DESIGN.md's list:

    commit_source   "git" | "env" | "none": where commit and dirty came from
    error           the exception message of an "error" record, else null
    shape_set       the --shapes the bench ran ("prod", "sweep", "all")
    seed            the seed the inputs were drawn from
    timing          {"rounds", "reps", "warmup"}: how the medians were sampled
    copy            {"bytes", "ms": {median, p20, p80, n}}: the copy-ceiling measurement
    clocks          {"start": {...}, "end": {...}}: nvidia-smi clocks ({} when unavailable)
    shapes[i].fwdbwd {candidate_ms, baseline_ms, ratio}: fwd+bwd through autograd
    shapes[i].rotation_sets  how many input sets the timing rotated through
    shapes[i].host_us  {calls, rounds, fwd: {candidate, baseline}, fwdbwd: {...}, torch_op}:
                    host microseconds per call (median over rounds of ``calls`` back-to-back
                    calls with the GPU kept busy); fwd without autograd, fwdbwd with it;
                    torch_op is ``x.mul(1.0)`` on the first input, timed in the same run
    shapes[i].peak_mem_bytes  {candidate, baseline}: peak CUDA memory of one fwd+bwd above
                    what was allocated before it

host_us and peak_mem_bytes appear on passed records benched since they were added; older
records lack them (absent, never zero), and they stay schema_version 1.

A shape entry's other keys are the family's shape fields (``shape_fields(shape)``, default
the shape dataclass's fields: cconv's are name, B, T, D, W, x_dtype, w_dtype): JSON scalars
or lists of them. A shape whose case the idea does not implement is absent from the record.

``ratio`` is always baseline median / candidate median (> 1: faster than fla). Keys starting
with ``_`` (``_path`` on loaded records) are never written.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ladder import paths
from ladder.paths import LadderError

__all__ = [
    "SCHEMA_VERSION",
    "STATUSES",
    "NoWinner",
    "RecordError",
    "RecordNotWritten",
    "Winner",
    "code_unchanged_since",
    "ensure_records_dir",
    "load_idea_records",
    "load_records",
    "current_code_sha_of",
    "explain_stale",
    "is_baseline",
    "prod_ratio",
    "read_record",
    "rescue_record",
    "validate_record",
    "winner",
    "write_record",
]

SCHEMA_VERSION = 1
STATUSES = ("passed", "incorrect", "error")
VERSION_KEYS = ("torch", "triton", "fla", "cutlass", "cuda-python", "python", "kernel_fun")
OUTPUT_ERR_KEYS = ("candidate_err", "baseline_err", "err_ratio")
# Keys of a shape entry the bench measures; every other key is a shape field of the family.
SHAPE_RESULT_KEYS = (
    "correctness",
    "fwd",
    "bwd",
    "fwdbwd",
    "rotation_sets",
    "peak_mem_bytes",
    "host_us",
)

_HEX64 = re.compile(r"^[0-9a-f]{64}\Z")
_HEX40 = re.compile(r"^[0-9a-f]{40}\Z")
_RECORD_ID = re.compile(r"^[0-9]{8}T[0-9]{6}Z-[0-9a-f]{6,64}(?:-[0-9]+)?\Z")


class RecordError(LadderError):
    """A record is malformed; the message names the record and the field."""


class NoWinner(LadderError):
    """No promotable record; the message says why."""

    exit_code = 1


# ------------------------------------------------------------------------------------------
# validation
# ------------------------------------------------------------------------------------------


def _where(rec: Any) -> str:
    if isinstance(rec, dict):
        if rec.get("_path"):
            return str(rec["_path"])
        if isinstance(rec.get("record_id"), str):
            return f"record {rec['record_id']}"
    return "record"


class _V:
    def __init__(self, rec: dict) -> None:
        self.rec = rec
        self.where = _where(rec)

    def fail(self, field: str, what: str) -> RecordError:
        return RecordError(f"{self.where}: {field}: {what}")

    def get(self, obj: dict, key: str, field: str) -> Any:
        if key not in obj:
            raise self.fail(field, "missing")
        return obj[key]

    def typed(self, obj: dict, key: str, field: str, types: tuple[type, ...], what: str) -> Any:
        val = self.get(obj, key, field)
        if isinstance(val, bool) and bool not in types:
            raise self.fail(field, f"expected {what}, got {val!r}")
        if not isinstance(val, types):
            raise self.fail(field, f"expected {what}, got {type(val).__name__} {val!r}")
        return val

    def number(self, obj: dict, key: str, field: str, *, positive: bool = False) -> float:
        val = self.typed(obj, key, field, (int, float), "a number")
        if not math.isfinite(val):
            raise self.fail(field, f"expected a finite number, got {val!r}")
        if positive and val <= 0:
            raise self.fail(field, f"expected a positive number, got {val!r}")
        return float(val)

    def opt_number(self, obj: dict, key: str, field: str) -> float | None:
        if obj.get(key, 0) is None:
            self.get(obj, key, field)
            return None
        return self.number(obj, key, field)

    def string(self, obj: dict, key: str, field: str, pattern: re.Pattern | None = None) -> str:
        val = self.typed(obj, key, field, (str,), "a string")
        if pattern is not None and not pattern.match(val):
            raise self.fail(field, f"malformed value {val!r}")
        return val

    def dict_(self, obj: dict, key: str, field: str) -> dict:
        return self.typed(obj, key, field, (dict,), "an object")

    def stats(self, obj: dict, key: str, field: str) -> None:
        st = self.dict_(obj, key, field)
        for k in ("median", "p20", "p80"):
            self.number(st, k, f"{field}.{k}", positive=True)
        n = self.typed(st, "n", f"{field}.n", (int,), "an integer")
        if n < 1:
            raise self.fail(f"{field}.n", f"expected >= 1, got {n}")
        if not st["p20"] <= st["median"] <= st["p80"]:
            raise self.fail(field, "expected p20 <= median <= p80")

    def timing(self, obj: dict, key: str, field: str, *, full: bool) -> None:
        t = self.dict_(obj, key, field)
        self.stats(t, "candidate_ms", f"{field}.candidate_ms")
        self.stats(t, "baseline_ms", f"{field}.baseline_ms")
        ratio = self.number(t, "ratio", f"{field}.ratio", positive=True)
        want = t["baseline_ms"]["median"] / t["candidate_ms"]["median"]
        if not math.isclose(ratio, want, rel_tol=1e-6):
            raise self.fail(f"{field}.ratio", f"{ratio} is not baseline/candidate = {want:.6g}")
        if full:
            mb = self.typed(t, "min_bytes", f"{field}.min_bytes", (int,), "an integer")
            if mb <= 0:
                raise self.fail(f"{field}.min_bytes", f"expected > 0, got {mb}")
            self.number(t, "fraction_of_copy", f"{field}.fraction_of_copy", positive=True)

    def shape_fields(self, shape: dict, field: str) -> None:
        """The family's shape fields (every key but the measured ones): JSON scalars or lists
        of them. Which fields exist is the family's business (cconv: B, T, D, W, dtypes)."""
        for key, val in shape.items():
            if key in SHAPE_RESULT_KEYS or key == "name" or key[:1] == "_":
                continue
            items = val if isinstance(val, list) else [val]
            for item in items:
                if item is not None and not isinstance(item, (str, int, float, bool)):
                    raise self.fail(
                        f"{field}.{key}",
                        f"expected a number, string, bool, null or a list of "
                        f"them, got {type(val).__name__}",
                    )
                if isinstance(item, float) and not math.isfinite(item):
                    raise self.fail(f"{field}.{key}", f"expected a finite number, got {item!r}")
        if "case" in shape and not isinstance(shape["case"], str):
            raise self.fail(f"{field}.case", f"expected a string, got {shape['case']!r}")

    def host_us(self, shape: dict, field: str) -> None:
        h = self.dict_(shape, "host_us", field)
        for key in ("calls", "rounds"):
            n = self.typed(h, key, f"{field}.{key}", (int,), "an integer")
            if n < 1:
                raise self.fail(f"{field}.{key}", f"expected >= 1, got {n}")
        for direction in ("fwd", "fwdbwd"):
            sides = self.dict_(h, direction, f"{field}.{direction}")
            for side in ("candidate", "baseline"):
                self.number(sides, side, f"{field}.{direction}.{side}", positive=True)
        if "torch_op" in h:
            self.number(h, "torch_op", f"{field}.torch_op", positive=True)

    def peak_mem(self, shape: dict, field: str) -> None:
        m = self.dict_(shape, "peak_mem_bytes", field)
        for side in ("candidate", "baseline"):
            n = self.typed(m, side, f"{field}.{side}", (int,), "an integer")
            if n < 0:
                raise self.fail(f"{field}.{side}", f"expected >= 0 bytes, got {n}")

    def correctness(self, obj: dict, field: str) -> bool:
        c = self.dict_(obj, "correctness", field)
        for key in OUTPUT_ERR_KEYS:
            errs = self.dict_(c, key, f"{field}.{key}")
            if not errs:
                raise self.fail(f"{field}.{key}", "expected one entry per output, got none")
            for out in errs:
                self.opt_number(errs, out, f"{field}.{key}.{out}")
        passed = self.typed(c, "passed", f"{field}.passed", (bool,), "true or false")
        return passed


def validate_record(rec: dict) -> None:
    """Check a record against schema_version 1; raise RecordError naming the first bad field
    (``<record>: <field path>: <what is wrong>``). Keys starting with ``_`` are ignored."""
    if not isinstance(rec, dict):
        raise RecordError(f"record: expected a JSON object, got {type(rec).__name__}")
    v = _V(rec)
    sv = v.typed(rec, "schema_version", "schema_version", (int,), "an integer")
    if sv != SCHEMA_VERSION:
        raise v.fail("schema_version", f"expected {SCHEMA_VERSION}, got {sv}")
    v.string(rec, "record_id", "record_id", _RECORD_ID)
    v.string(rec, "family", "family", paths.FAMILY_RE)
    v.string(rec, "idea", "idea", paths.IDEA_RE)
    created = v.string(rec, "created", "created")
    try:
        dt = datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        raise v.fail("created", f"not ISO 8601: {created!r}") from None
    if dt.utcoffset() is None or dt.utcoffset().total_seconds() != 0:
        raise v.fail("created", f"expected a UTC time, got {created!r}")
    dirty = v.typed(rec, "dirty", "dirty", (bool,), "true or false")
    commit = v.get(rec, "commit", "commit")
    if commit is None:
        if not dirty:
            raise v.fail("commit", "null commit on a record that is not dirty")
    elif not isinstance(commit, str) or not _HEX40.match(commit):
        raise v.fail("commit", f"expected a 40-hex commit sha or null, got {commit!r}")
    src = v.string(rec, "commit_source", "commit_source")
    if src not in ("git", "env", "none"):
        raise v.fail("commit_source", f"expected git, env or none, got {src!r}")
    v.string(rec, "code_sha", "code_sha", _HEX64)
    v.string(rec, "code_unchanged_since", "code_unchanged_since", _RECORD_ID)
    v.string(rec, "harness_sha", "harness_sha", _HEX64)
    dev = v.dict_(rec, "device", "device")
    v.string(dev, "name", "device.name")
    v.string(dev, "capability", "device.capability")
    v.string(dev, "driver", "device.driver")
    vers = v.dict_(rec, "versions", "versions")
    for key in VERSION_KEYS:
        v.string(vers, key, f"versions.{key}")
    knobs = v.dict_(rec, "knobs", "knobs")
    for key, val in knobs.items():
        if not isinstance(val, (int, float, bool, str)):
            raise v.fail(f"knobs.{key}", f"expected int, float, bool or str, got {val!r}")
        if isinstance(val, float) and not math.isfinite(val):
            raise v.fail(f"knobs.{key}", f"expected a finite number, got {val!r}")
    clocks = v.dict_(rec, "clocks", "clocks")
    v.dict_(clocks, "start", "clocks.start")
    v.dict_(clocks, "end", "clocks.end")
    status = v.string(rec, "status", "status")
    if status not in STATUSES:
        raise v.fail("status", f"expected one of {', '.join(STATUSES)}, got {status!r}")
    error = v.get(rec, "error", "error")
    if status == "error":
        if not isinstance(error, str) or not error.strip():
            raise v.fail("error", "an error record needs the error message")
    elif error is not None:
        raise v.fail("error", f"expected null on a {status} record")
    ceiling = v.opt_number(rec, "copy_ceiling_TBps", "copy_ceiling_TBps")
    shapes = v.typed(rec, "shapes", "shapes", (list,), "a list")
    if status == "passed":
        if ceiling is None or ceiling <= 0:
            raise v.fail("copy_ceiling_TBps", "a passed record needs the measured copy ceiling")
        if not shapes:
            raise v.fail("shapes", "a passed record needs at least one shape")
    names: set[str] = set()
    any_failed = False
    for i, shape in enumerate(shapes):
        f = f"shapes[{i}]"
        if not isinstance(shape, dict):
            raise v.fail(f, "expected an object")
        name = v.string(shape, "name", f"{f}.name")
        if name in names:
            raise v.fail(f"{f}.name", f"shape {name!r} appears twice")
        names.add(name)
        v.shape_fields(shape, f)
        passed = v.correctness(shape, f"{f}.correctness")
        any_failed |= not passed
        for direction in ("fwd", "bwd", "fwdbwd"):
            timed = shape.get(direction) is not None
            if status == "passed":
                v.timing(shape, direction, f"{f}.{direction}", full=direction != "fwdbwd")
            elif timed:
                raise v.fail(f"{f}.{direction}", f"a {status} record carries no timing")
        for key in ("host_us", "peak_mem_bytes"):  # added later: absent in older records
            if key not in shape:
                continue
            if status != "passed":
                raise v.fail(f"{f}.{key}", f"a {status} record carries no measurement")
            if key == "host_us":
                v.host_us(shape, f"{f}.host_us")
            else:
                v.peak_mem(shape, f"{f}.peak_mem_bytes")
        if status == "passed" and not passed:
            raise v.fail(f"{f}.correctness.passed", "false on a passed record")
    if status == "incorrect" and not any_failed:
        raise v.fail("status", "incorrect, but every shape's correctness passed")


# ------------------------------------------------------------------------------------------
# writing and loading
# ------------------------------------------------------------------------------------------


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
        fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=TEMP_SUFFIX, dir=out_dir)
    except OSError as exc:
        raise RecordError(f"cannot write a record in {out_dir}: {_os_reason(exc)}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, final)
        except FileExistsError:
            raise RecordError(
                f"{final} exists; records are never rewritten (bench again for a new record_id)"
            ) from None
        except OSError:
            # A file system without hard links: rename the complete file into place.
            if os.path.lexists(final):
                raise RecordError(f"{final} exists; records are never rewritten") from None
            os.replace(tmp, final)
    except OSError as exc:
        raise RecordError(f"cannot write {final}: {_os_reason(exc)}") from None
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
    return final


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


def _created(rec: dict) -> datetime:
    return datetime.fromisoformat(rec["created"].replace("Z", "+00:00"))


def _age_key(rec: dict) -> tuple[datetime, str]:
    return (_created(rec), rec["record_id"])


def code_unchanged_since(idea_dir: Path, code_sha: str, record_id: str) -> str:
    """The record_id of the oldest existing record of the idea with this code_sha, or
    ``record_id`` (the new record's own) when there is none."""
    same = [r for r in load_idea_records(idea_dir) if r["code_sha"] == code_sha]
    return same[0]["record_id"] if same else record_id


# ------------------------------------------------------------------------------------------
# ranking
# ------------------------------------------------------------------------------------------


def _shape(rec: dict, name: str) -> dict | None:
    return next((s for s in rec.get("shapes", []) if s.get("name") == name), None)


def prod_ratio(rec: dict) -> float | None:
    """(baseline fwd + bwd medians) / (candidate fwd + bwd medians) at the ``prod`` shape, or
    None when the record has no timed prod shape."""
    s = _shape(rec, "prod")
    if s is None or not s.get("fwd") or not s.get("bwd"):
        return None
    base = s["fwd"]["baseline_ms"]["median"] + s["bwd"]["baseline_ms"]["median"]
    cand = s["fwd"]["candidate_ms"]["median"] + s["bwd"]["candidate_ms"]["median"]
    return base / cand


@dataclass
class Winner:
    """The promotable record with the best prod ratio. idea: the idea folder name.
    passed_over: one line per stale record that would have ranked above it, saying which
    files made it stale (empty when staleness is judged at a commit, as the vendor does)."""

    record: dict
    idea: str
    record_path: Path
    score: float
    passed_over: list[str] = field(default_factory=list)


def is_baseline(folder: str) -> bool:
    """Whether an idea folder is the family's baseline benched as an idea (``000-*``): shown
    on the board, never a winner."""
    return paths.IDEA_RE.match(folder) is not None and folder[:3] == "000"


def explain_stale(rec: dict, idea_dir: Path) -> str:
    """Why a record's code_sha differs from its idea's code now, in one line: the files that
    differ (changed, added, removed) between the record's commit and the working tree, when
    git can tell; else why it cannot."""
    from ladder import codehash

    commit = rec.get("commit")
    try:
        now = codehash.idea_files_from_dir(idea_dir)
    except codehash.CodeHashError as exc:
        return f"code differs from the record's ({exc})"
    if not commit:
        return "code differs from the record's (it names no commit, so the files are unknown)"
    try:
        then = codehash.idea_files_in_history(idea_dir, commit)
    except codehash.CodeHashError:
        return (
            f"code differs from the record's (its commit {commit[:12]} is not in this "
            f"repository, so the files are unknown)"
        )
    if codehash.code_sha(then) != rec.get("code_sha"):
        return (
            f"code differs from the record's (it was benched on code other than commit "
            f"{commit[:12]}'s, so the files are unknown)"
        )
    diff = codehash.diff_files(then, now)
    if not diff:  # cannot happen while both sides hash the same files; said plainly if it does
        return f"code_sha differs from the record's, though no file differs from {commit[:12]}"
    return f"{', '.join(diff)} since commit {commit[:12]}"


def current_code_sha_of(family: str, root: Path | None = None) -> Callable[[str], str]:
    """A cached function: idea folder name -> code_sha of its working-tree files."""
    from ladder import codehash

    cache: dict[str, str] = {}
    fdir = paths.family_dir(family, root)

    def of(folder: str) -> str:
        if folder not in cache:
            cache[folder] = codehash.code_sha(codehash.idea_files_from_dir(fdir / "ideas" / folder))
        return cache[folder]

    return of


def winner(
    family: str,
    root: Path | None = None,
    *,
    device: str | None = None,
    code_sha_of: Callable[[str], str] | None = None,
    explain: Callable[[dict], str] | None = None,
) -> Winner:
    """The family's winner among its records.

    Promotable: not the baseline idea (``000-*``), status "passed", dirty false, device name
    containing ``device`` (case-insensitive; default the family's TARGET_DEVICE), a timed
    prod shape, and code_sha equal to ``code_sha_of(idea folder name)`` (default: the
    working tree's code), and faster than fla at prod (prod ratio above 1: a slower idea is
    research, not a release). Best: highest :func:`prod_ratio`; ties go to the earliest created,
    then the smallest record_id. explain(record) says why a stale record is stale (default:
    :func:`explain_stale` against the working tree when ``code_sha_of`` is the default, else
    nothing). Raises NoWinner with the reason each record was passed over.
    """
    recs = load_records(family, root)
    if device is None:
        device = str(paths.load_family(family, root).TARGET_DEVICE)
    sha_of = code_sha_of or current_code_sha_of(family, root)
    if explain is None and code_sha_of is None:
        fdir = paths.family_dir(family, root)

        def explain(rec: dict) -> str:
            return explain_stale(rec, fdir / "ideas" / Path(rec["_path"]).parent.parent.name)

    reasons = {
        "baseline": 0,
        "not passed": 0,
        "dirty": 0,
        "other device": 0,
        "no prod timing": 0,
        "stale": 0,
        "not faster than fla": 0,
    }
    best: tuple[tuple, dict, float] | None = None
    stale: list[tuple[float, dict]] = []
    for rec in recs:
        if is_baseline(Path(rec["_path"]).parent.parent.name):
            reasons["baseline"] += 1
            continue
        if rec["status"] != "passed":
            reasons["not passed"] += 1
            continue
        if rec["dirty"]:
            reasons["dirty"] += 1
            continue
        if device.lower() not in rec["device"]["name"].lower():
            reasons["other device"] += 1
            continue
        score = prod_ratio(rec)
        if score is None:
            reasons["no prod timing"] += 1
            continue
        folder = Path(rec["_path"]).parent.parent.name
        if rec["code_sha"] != sha_of(folder):
            reasons["stale"] += 1
            stale.append((score, rec))
            continue
        if not score > 1.0:  # promoting it would make the package slower than fla
            reasons["not faster than fla"] += 1
            continue
        key = (-score, _created(rec), rec["record_id"])
        if best is None or key < best[0]:
            best = (key, rec, score)
    if best is None:
        if not recs:
            raise NoWinner(
                f"no {family} records yet; bench an idea on the GPU: "
                f"`python -m ladder bench {family} <idea>`"
            )
        parts = [f"{n} {label}" for label, n in reasons.items() if n]
        why = "; ".join(_stale_lines(stale, explain, limit=3))
        raise NoWinner(
            f"no promotable {family} record on a device matching {device!r} among {len(recs)} "
            f"({', '.join(parts)}){'; ' + why if why else ''}; commit, then "
            f"`python -m ladder bench {family} <idea>` on a clean tree"
        )
    _, rec, score = best
    path = Path(rec["_path"])
    above = [(s, r) for s, r in stale if s > score]
    return Winner(
        record=rec,
        idea=path.parent.parent.name,
        record_path=path,
        score=score,
        passed_over=_stale_lines(above, explain, limit=5),
    )


def _stale_lines(
    stale: list[tuple[float, dict]], explain: Callable[[dict], str] | None, *, limit: int
) -> list[str]:
    """'<idea> record <id> (prod x) is stale: <why>' for the best-scoring stale records, one
    per idea, at most ``limit``; [] without an explainer."""
    if explain is None:
        return []
    out, seen = [], set()
    for score, rec in sorted(stale, key=lambda sr: -sr[0]):
        folder = Path(rec["_path"]).parent.parent.name
        if folder in seen:
            continue
        seen.add(folder)
        out.append(
            f"{folder} record {rec['record_id']} (prod {score:.3f}x) is stale: {explain(rec)}"
        )
        if len(out) == limit:
            break
    return out
