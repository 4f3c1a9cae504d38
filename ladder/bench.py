"""``ladder bench``: time an idea against fla on the GPU and write one bench record.

The run: load and prepare the idea, record where the measurement comes from
(ladder.provenance: commit, dirty, versions, device), measure on the GPU (ladder.measure, whose
docstring states the method), then write the record.

Only the shapes whose case the idea implements (its ``CASES``) are run and recorded.

The record is written once, at the end, by an exclusive create: an interrupted bench leaves
no file. An exception while measuring gives an "error" record carrying the message.
"""

from __future__ import annotations

import secrets
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import Any

from ladder import codehash, contract, paths, records, timing
from ladder.measure import (
    COPY_MIN_BYTES,
    HOST_CALLS,
    HOST_ROUNDS,
    ROTATE_L2_FACTOR,
    BenchState,
    measure,
)
from ladder.paths import LadderError, NoGpu
from ladder.prepare import PreparedIdea, check_seed, prepare_idea, related_ideas
from ladder.provenance import CLOCK_FIELDS, GitState, git_state, nvidia_smi, versions

__all__ = [
    "BenchOptions",
    "BenchState",
    "GitState",
    "covered_shapes",
    "GpuRuntime",
    "HOST_CALLS",
    "HOST_ROUNDS",
    "git_state",
    "new_record_id",
    "measure",
    "run_bench",
    "select_shapes",
    "shape_names",
    "versions",
]

BENCH_SHAPE_SETS = ("prod", "sweep", "all")
# What a record keeps of a shape only when every shape was correct and all was measured.
MEASURED_KEYS = ("fwd", "bwd", "fwdbwd", "host_us", "peak_mem_bytes")


@dataclass
class BenchOptions:
    """What ``ladder bench`` was asked to do. knobs: ``KEY=VALUE`` strings; out: write the
    record there instead of the idea's records/; seed: None draws a fresh one."""

    family: str
    idea: str
    shapes: str = "all"
    knobs: list[str] = field(default_factory=list)
    allow_dirty: bool = False
    out: Path | None = None
    rounds: int = 8
    reps: int = 25
    warmup: int = 1
    seed: int | None = None
    root: Path | None = None


def covered_shapes(family: ModuleType, idea: Any, shapes: list[Any]) -> list[Any]:
    """The shapes whose case the idea implements (its CASES; see ladder.contract), in order.
    The others are left out of the run and of the record (absent, not failed)."""
    cases = contract.idea_cases(family, idea, getattr(idea, "__name__", "idea"))
    return [s for s in shapes if contract.shape_case(s) in cases]


def shape_names(which: str) -> list[str]:
    """The names of a comma-separated ``--shapes`` value, blanks dropped, each once, in order."""
    return list(dict.fromkeys(n.strip() for n in which.split(",") if n.strip()))


def select_shapes(family: ModuleType, which: str, allowed: tuple[str, ...]) -> list[Any]:
    """The family's shapes for ``which``: a set name in ``allowed`` ("all" = prod + sweep), or
    comma-separated shape names of the family (e.g. "v128,gva", to bench a few shapes per
    run when each needs minutes of compilation). Raises LadderError for an unknown name."""
    if which == "all" and "all" in allowed:
        return [*family.SHAPES.get("prod", []), *family.SHAPES.get("sweep", [])]
    if which in allowed:
        if which not in family.SHAPES:
            raise LadderError(f"family {family.FAMILY} defines no {which!r} shapes")
        return list(family.SHAPES[which])
    by_name = {s.name: s for group in family.SHAPES.values() for s in group}
    names = shape_names(which)
    # a set's name that is no shape's ("prod" is both in every family: the prod shape)
    sets = [n for n in names if (n in family.SHAPES or n in allowed) and n not in by_name]
    if sets and len(names) > 1:
        raise LadderError(
            f"--shapes {which!r}: {', '.join(sets)} {'is a shape set' if len(sets) == 1 else 'are shape sets'}; "
            f"give one set alone, or shape names only"
        )
    unknown = [n for n in names if n not in by_name]
    if not names:
        raise LadderError(
            f"--shapes {which!r} names no shape: give a shape set ({', '.join(allowed)}) or "
            f"shape names of family {family.FAMILY} ({', '.join(sorted(by_name))})"
        )
    other_sets = [n for n in unknown if n in family.SHAPES]  # e.g. a family's "small" set
    if other_sets:
        n = other_sets[0]
        raise LadderError(
            f"--shapes {which!r}: {n} is a shape set of family {family.FAMILY} that is not "
            f"benched as a set (sets: {', '.join(allowed)}); name its shapes instead: "
            f"--shapes {','.join(s.name for s in family.SHAPES[n])}"
        )
    if unknown:
        raise LadderError(
            f"--shapes {which!r}: {', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} "
            f"neither a shape set ({', '.join(allowed)}) nor a shape of family "
            f"{family.FAMILY} ({', '.join(sorted(by_name))})"
        )
    return [by_name[n] for n in names]


class GpuRuntime:
    """The real machine: CUDA via torch, nvidia-smi for driver and clocks."""

    def __init__(self) -> None:
        self._smi_id: str | None = None

    def unavailable(self) -> str | None:
        """None when a CUDA GPU is usable, else why not."""
        try:
            import torch
        except ImportError:
            return "torch is not installed"
        if not torch.cuda.is_available():
            return "no CUDA GPU is visible"
        return None

    def device_info(self) -> dict[str, Any]:
        """{name, capability "9.0", driver, sm_count, l2_bytes, memory_bytes, cuda}."""
        import torch

        idx = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(idx)
        uuid = getattr(props, "uuid", None)
        self._smi_id = f"GPU-{uuid}" if uuid else str(idx)
        smi = nvidia_smi(["driver_version"], self._smi_id)
        return {
            "name": str(props.name),
            "capability": f"{props.major}.{props.minor}",
            "driver": smi.get("driver_version", "unknown"),
            "sm_count": int(props.multi_processor_count),
            "l2_bytes": int(getattr(props, "L2_cache_size", 0)),
            "memory_bytes": int(props.total_memory),
            "cuda": str(torch.version.cuda),
        }

    def clocks(self) -> dict[str, str]:
        """nvidia-smi clocks (MHz), temperature (C) and power (W); {} when unavailable."""
        return nvidia_smi(CLOCK_FIELDS, self._smi_id)

    def versions(self) -> dict[str, str]:
        return versions()

    def measure(self, state: BenchState) -> None:
        """Run correctness, the copy ceiling and the timings on the current CUDA device."""
        import torch

        l2 = int(state.device.get("l2_bytes") or 0) or (60 << 20)
        measure(
            state,
            device=torch.device("cuda", torch.cuda.current_device()),
            clock=timing.CudaClock(),
            l2_bytes=l2,
            copy_bytes=max(COPY_MIN_BYTES, int(ROTATE_L2_FACTOR * l2)),
            peak_bytes=timing.cuda_peak_bytes,
        )


def new_record_id(created: datetime, code_sha: str, taken: Callable[[str], bool]) -> str:
    """``<UTC yyyymmddTHHMMSSZ>-<code_sha[:8]>``, with ``-2``, ``-3``, ... appended while
    ``taken(record_id)`` says the name is used."""
    base = f"{created.astimezone(timezone.utc):%Y%m%dT%H%M%SZ}-{code_sha[:8]}"
    rid, n = base, 1
    while taken(rid):
        n += 1
        rid = f"{base}-{n}"
    return rid


def _error_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    lines = text.splitlines()
    if len(lines) > 40:
        lines = [*lines[:40], f"... ({len(lines) - 40} more lines)"]
    return "\n".join(lines)[:8000]


def run_bench(
    opts: BenchOptions,
    *,
    runtime: Any | None = None,
    progress: Callable[[str, float, float], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> tuple[dict, Path]:
    """Bench an idea and write its record; returns (record, path).

    runtime: the machine (default :class:`GpuRuntime`; tests pass a stand-in with the same
    methods). progress(description, advance, total) is called as work proceeds; log(text)
    receives the traceback of a failed measurement. Raises UnknownFamily, UnknownIdea,
    BadIdea, LadderError (knobs, git state, options, a seed outside [0, 2**63)), NoGpu or
    RecordError (the output folder is a file or cannot be written) before anything is
    measured; KeyboardInterrupt and other BaseExceptions propagate and leave no record.
    """
    rt = runtime if runtime is not None else GpuRuntime()
    if opts.rounds < 1 or opts.reps < 1:
        raise LadderError("--rounds and --reps must be at least 1")
    if opts.warmup < 0:
        raise LadderError(f"--warmup must be 0 or more, got {opts.warmup}")
    check_seed(opts.seed)
    fam = paths.load_family(opts.family, opts.root, complete=True)
    shapes = select_shapes(fam, opts.shapes, BENCH_SHAPE_SETS)
    prepared: PreparedIdea = prepare_idea(opts.family, opts.idea, opts.knobs, opts.root, load=False)
    why = rt.unavailable()
    if why:
        no_interp = getattr(fam, "NO_INTERPRETER", None)
        baseline_only_on_gpu = paths.idea_number(prepared.folder) == 0 and not getattr(
            fam, "BASELINE_ON_INTERPRETER", False
        )  # as `ladder check` refuses it
        if no_interp:
            here = f"since this family cannot run on the CPU interpreter ({no_interp})"
        elif baseline_only_on_gpu:
            here = (
                "since the baseline cannot run on the CPU interpreter (its kernels are autotuned)"
            )
        else:
            here = (
                f"or check correctness here with `python -m ladder check {opts.family} "
                f"{prepared.folder} --interpret`"
            )
        raise NoGpu(f"`ladder bench` needs a CUDA GPU ({why}); run it on the GPU machine, {here}")
    git = git_state(opts.root or paths.repo_root(), allow_dirty=opts.allow_dirty)
    idea_dir = prepared.idea_dir
    # The folder the record goes to must be writable now, not after minutes of measuring.
    out_dir = records.ensure_records_dir(
        Path(opts.out) if opts.out is not None else idea_dir / "records"
    )
    prepared = prepare_idea(opts.family, prepared.folder, opts.knobs, opts.root, load=True)
    assert prepared.module is not None
    shapes = covered_shapes(fam, prepared.module, shapes)
    if not shapes:
        cases = ", ".join(contract.idea_cases(fam, prepared.module, prepared.folder))
        raise LadderError(
            f"idea {prepared.folder} implements the cases {cases}, and no {opts.shapes!r} shape "
            f"of {opts.family} is one of them; pick another --shapes or add the case to its "
            f"CASES"
        )
    csha = codehash.code_sha(codehash.idea_files_from_dir(idea_dir))
    # Read (and validate) the idea's records now, not after minutes of measuring.
    unchanged_since = records.code_unchanged_since(idea_dir, csha, "")
    fdir = paths.family_dir(opts.family, opts.root)
    related = {
        f: codehash.code_sha(codehash.idea_files_from_dir(fdir / "ideas" / f))
        for f in related_ideas(opts.family, prepared.folder, opts.root)
    }
    seed = opts.seed if opts.seed is not None else secrets.randbits(30)
    device = rt.device_info()
    clocks_start = rt.clocks()
    vers = rt.versions()
    knob_values = prepared.knob_values()

    # correctness per shape, then a block per side (candidate, baseline, copy) per round
    total = float(len(shapes) + len(shapes) * 3 * 3 * opts.rounds)

    def step(desc: str, advance: float) -> None:
        if progress is not None:
            progress(desc, advance, total)

    state = BenchState(
        options=opts,
        family=fam,
        idea=prepared.module,
        shapes=shapes,
        seed=seed,
        device=device,
        progress=step,
    )
    error: str | None = None
    try:
        rt.measure(state)
    except NotImplementedError as exc:  # a scaffold: nothing to record
        raise LadderError(
            f"not written yet: {(str(exc).strip().splitlines() or [''])[0]}; nothing benched "
            f"(`python -m ladder check {opts.family} {prepared.folder}` shows what is missing)"
        ) from None
    except Exception as exc:  # an "error" record; BaseException (Ctrl-C) propagates
        state.status = "error"
        error = _error_text(exc)
        if log is not None:
            log("".join(traceback.format_exception(exc)))
    if state.status not in ("passed", "incorrect"):
        state.status = "error"
        error = error or "the measurement ended without a result"
    entries = state.entries
    if state.status != "passed":
        entries = [{k: v for k, v in e.items() if k not in MEASURED_KEYS} for e in entries]
    created = datetime.now(timezone.utc).replace(microsecond=0)
    record_id = new_record_id(created, csha, lambda rid: (out_dir / f"{rid}.json").exists())
    rec: dict[str, Any] = {
        "schema_version": records.SCHEMA_VERSION,
        "record_id": record_id,
        "family": opts.family,
        "idea": prepared.folder,
        "created": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": git.commit,
        "dirty": git.dirty,
        "commit_source": git.source,
        "code_sha": csha,
        "code_unchanged_since": unchanged_since or record_id,
        "related_code_sha": related,
        "harness_sha": codehash.harness_sha(),
        "device": device,
        "versions": vers,
        "knobs": knob_values,
        "copy_ceiling_TBps": state.copy_ceiling_TBps if state.status == "passed" else None,
        "copy": state.copy if state.status == "passed" else None,
        "status": state.status,
        "error": error,
        "shape_set": opts.shapes,
        "seed": seed,
        "timing": {"rounds": opts.rounds, "reps": opts.reps, "warmup": opts.warmup},
        "clocks": {"start": clocks_start, "end": rt.clocks()},
        "shapes": entries,
    }
    path = records.write_record(idea_dir, rec, records_dir=out_dir)
    return rec, path
