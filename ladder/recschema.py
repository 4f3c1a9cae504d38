"""Bench records: the schema and its validation.

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
                    torch_op is ``x.mul(1.0)`` on the first input, timed in the same run;
                    torch_op_fwdbwd (records since it was added) the same op's forward and
                    backward through autograd, the floor of fwdbwd
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

import math
import re
from datetime import datetime
from typing import Any

from ladder import paths
from ladder.paths import LadderError

__all__ = [
    "OUTPUT_ERR_KEYS",
    "SCHEMA_VERSION",
    "SHAPE_RESULT_KEYS",
    "STATUSES",
    "VERSION_KEYS",
    "RecordError",
    "validate_record",
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
        try:
            finite = math.isfinite(val)
        except OverflowError:  # an int beyond float's range
            finite = False
        if not finite:
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
        for key in ("torch_op", "torch_op_fwdbwd"):
            if key in h:
                self.number(h, key, f"{field}.{key}", positive=True)

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
        if "pooled" in c:  # few-element outputs judged over several seeds (ladder.check)
            pooled = self.dict_(c, "pooled", f"{field}.pooled")
            for out, p in pooled.items():
                where = f"{field}.pooled.{out}"
                if not isinstance(p, dict):
                    raise self.fail(where, f"expected an object, got {p!r}")
                seeds = self.typed(p, "seeds", f"{where}.seeds", (int,), "an integer")
                if seeds < 2:
                    raise self.fail(f"{where}.seeds", f"expected 2 or more, got {seeds}")
                for key in ("candidate_err", "baseline_err", "err_ratio", "worst_candidate_err"):
                    self.opt_number(p, key, f"{where}.{key}")
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
