"""``ladder bench``: time an idea against fla on the GPU and write one bench record.

How it measures (docs/DESIGN.md "Bench records"):

1. Correctness first, every shape: fresh random inputs, the fp64 oracle, fla's error, the
   candidate on NaN-poisoned memory (ladder.check). Compilation and autotuning of both sides
   happen here, outside any timed window. If any shape fails, the record is "incorrect" and
   nothing is timed.
2. Per shape and direction (fwd, bwd, fwd+bwd through autograd), candidate and fla are timed
   interleaved in blocks with CUDA events (ladder.timing), rotating through enough fresh
   input sets that each block's working set exceeds the L2. A family's
   ``baseline_retune()`` runs first, then one untimed baseline call, so fla is timed with
   the configuration it tunes at this shape (not one picked at another shape or read from
   a disk cache another process wrote).
3. The copy ceiling: a device-to-device ``copy_`` of a buffer several times the L2, timed as
   a third side in every interleaved set of step 2, so it sees the same clocks and drift as
   the kernels; TB/s counts bytes read + written. bwd alone calls each side's
   backward on a context its forward made untimed; fwdbwd goes through autograd. All of
   these are the zero-argument callables of the family's ``timed(impl, inputs)`` (made once
   per rotated input set, outside the timed window), for the idea and for ``BASELINE``.

4. Per shape, after its timings: host time per call (ladder.timing.host_time_us: fwd under
   ``torch.no_grad`` and fwd+bwd with autograd, candidate and baseline, and ``x.mul(1.0)``
   on the first input as the floor, interleaved in one run with the GPU kept busy) and, on a
   GPU, the peak memory of one fwd+bwd per side (ladder.timing.cuda_peak_bytes).

Only the shapes whose case the idea implements (its ``CASES``) are run and recorded.

The record is written once, at the end, by an exclusive create: an interrupted bench leaves
no file. An exception while measuring gives an "error" record carrying the message.
"""

from __future__ import annotations

import math
import os
import platform
import secrets
import shutil
import subprocess
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

from ladder import codehash, contract, paths, records, timing
from ladder.check import check_shape
from ladder.paths import LadderError, NoGpu
from ladder.prepare import PreparedIdea, check_seed, prepare_idea, related_ideas

__all__ = [
    "BenchOptions",
    "BenchState",
    "GitState",
    "covered_shapes",
    "GpuRuntime",
    "git_state",
    "new_record_id",
    "measure",
    "run_bench",
    "select_shapes",
    "versions",
]

ROTATE_L2_FACTOR = 3.0  # input sets per timed block cover at least this many L2 sizes
MAX_ROTATION_SETS = 64
COPY_MIN_BYTES = 512 << 20
BENCH_SHAPE_SETS = ("prod", "sweep", "all")
HOST_CALLS = 20  # back-to-back calls per host-time block
HOST_ROUNDS = 5
HOST_DIRECTIONS = ("fwd", "fwdbwd")
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
    names = [n.strip() for n in which.split(",") if n.strip()]
    unknown = [n for n in names if n not in by_name]
    if not names or unknown:
        raise LadderError(
            f"--shapes {which!r}: {', '.join(unknown) or 'no name'} is neither a shape set "
            f"({', '.join(allowed)}) nor a shape of family {family.FAMILY} "
            f"({', '.join(sorted(by_name))})"
        )
    return [by_name[n] for n in names]


# ------------------------------------------------------------------------------------------
# provenance: git, versions, device
# ------------------------------------------------------------------------------------------


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


def _nvidia_smi(fields: list[str], device_id: str | None) -> dict[str, str]:
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


_CLOCK_FIELDS = [
    "clocks.sm",
    "clocks.mem",
    "clocks.max.sm",
    "clocks.max.mem",
    "temperature.gpu",
    "power.draw",
]


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
        smi = _nvidia_smi(["driver_version"], self._smi_id)
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
        return _nvidia_smi(_CLOCK_FIELDS, self._smi_id)

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


# ------------------------------------------------------------------------------------------
# the measurement
# ------------------------------------------------------------------------------------------


@dataclass
class BenchState:
    """What a bench run has found so far. shapes: one entry per shape in record form;
    status: "passed" / "incorrect" once measure() returns."""

    options: BenchOptions
    family: ModuleType
    idea: ModuleType
    shapes: list[Any]
    seed: int
    device: dict[str, Any]
    progress: Callable[[str, float], None]
    entries: list[dict] = field(default_factory=list)
    copy: dict | None = None
    copy_ceiling_TBps: float | None = None
    status: str = "error"


def _tbps(nbytes: int, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e12


def measure(
    state: BenchState,
    *,
    device: Any,
    clock: timing.Clock,
    l2_bytes: int,
    copy_bytes: int,
    peak_bytes: Callable[[Callable[[], Any]], int] | None = None,
) -> None:
    """Correctness of every shape, then (all passed) the copy ceiling, every timing and the
    host time per call, on ``device`` with ``clock``; fills ``state`` (entries, copy,
    status). Input sets rotate to cover ROTATE_L2_FACTOR * l2_bytes per block.
    ``peak_bytes(fn)``: the peak memory of one call (timing.cuda_peak_bytes on a GPU); None
    leaves ``peak_mem_bytes`` out of the record. Exceptions propagate."""
    import torch

    fam, idea, opts = state.family, state.idea, state.options
    dev = torch.device(device)
    l2 = l2_bytes

    # 1. correctness (compiles and autotunes both sides)
    for i, shape in enumerate(state.shapes):
        state.progress(f"{shape.name}: correctness (compile + autotune)", 0)
        chk = check_shape(fam, idea, shape, dev, state.seed + i, baseline=True)
        state.entries.append(
            {**contract.shape_fields(fam, shape), "correctness": chk.record_entry()}
        )
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        state.progress(f"{shape.name}: correctness", 1)
    if not all(e["correctness"]["passed"] for e in state.entries):
        state.status = "incorrect"
        return

    def block(label: str) -> Callable[[str, int], None]:
        return lambda name, r: state.progress(f"{label}: {name} round {r + 1}/{opts.rounds}", 1)

    # 2. timings, with the copy ceiling as a third side in every interleaved set, so it is
    # sampled across the whole run under the same conditions as the kernels.
    src = torch.ones(copy_bytes, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    copy_ms: list[float] = []

    def copy(i: int) -> None:
        dst.copy_(src)

    for i, (shape, entry) in enumerate(zip(state.shapes, state.entries, strict=True)):
        seed = state.seed + 1000 * (i + 1)
        copy_ms += _time_shape(state, shape, entry, seed, dev, l2, clock, block, copy, peak_bytes)
        if dev.type == "cuda":
            torch.cuda.empty_cache()

    # 3. the ceiling, and each direction's fraction of it
    summary = timing.summarize(copy_ms)
    state.copy = {"bytes": 2 * copy_bytes, "ms": summary}
    state.copy_ceiling_TBps = _tbps(2 * copy_bytes, summary["median"])
    for entry in state.entries:
        for direction in ("fwd", "bwd"):
            t = entry[direction]
            t["fraction_of_copy"] = t["candidate_TBps"] / state.copy_ceiling_TBps
    state.status = "passed"


def _time_shape(
    state: BenchState,
    shape: Any,
    entry: dict,
    seed: int,
    dev: Any,
    l2: int,
    clock: timing.Clock,
    block: Callable[[str], Callable[[str, int], None]],
    copy: Callable[[int], Any],
    peak_bytes: Callable[[Callable[[], Any]], int] | None,
) -> list[float]:
    """Time fwd, bwd and fwd+bwd of one shape, candidate vs baseline, each interleaved with
    the device copy; then host time per call and (with ``peak_bytes``) the peak memory of
    one fwd+bwd per side. Fills ``entry`` (all but fraction_of_copy). The callables come
    from the family's ``timed(impl, inputs)``, one plan per rotated input set. Returns the
    copy's times."""
    fam, opts = state.family, state.options
    n_sets = max(
        1, min(MAX_ROTATION_SETS, math.ceil(ROTATE_L2_FACTOR * l2 / fam.min_bytes(shape, "bwd")))
    )
    sets = [tuple(fam.make_inputs(shape, dev, seed + k)) for k in range(n_sets)]
    retune = getattr(fam, "baseline_retune", None)
    if retune is not None:  # the baseline is timed with its pick for this shape
        retune()
        fam.run(fam.BASELINE, sets[0], _no_poison)
    sides = {"candidate": state.idea, "baseline": fam.BASELINE}
    plans = {side: [_plan(fam, impl, s) for s in sets] for side, impl in sides.items()}

    def caller(side: str, direction: str) -> Callable[[int], Any]:
        fns = [p[direction] for p in plans[side]]
        return lambda k: fns[k % n_sets]()

    copy_ms: list[float] = []
    entry["rotation_sets"] = n_sets
    for direction in contract.TIMED_KEYS:
        fns = {side: caller(side, direction) for side in sides}
        ms = timing.time_interleaved(
            {**fns, "copy": copy},
            rounds=opts.rounds,
            reps=opts.reps,
            warmup=opts.warmup,
            clock=clock,
            on_block=block(f"{shape.name} {direction}"),
        )
        cand, base = timing.summarize(ms["candidate"]), timing.summarize(ms["baseline"])
        res: dict[str, Any] = {
            "candidate_ms": cand,
            "baseline_ms": base,
            "ratio": base["median"] / cand["median"],
        }
        if direction != "fwdbwd":
            mb = int(fam.min_bytes(shape, direction))
            res["min_bytes"] = mb
            res["candidate_TBps"] = _tbps(mb, cand["median"])
            res["baseline_TBps"] = _tbps(mb, base["median"])
        entry[direction] = res
        copy_ms += ms["copy"]
    state.progress(f"{shape.name}: host time and peak memory", 0)
    entry["host_us"] = _host_us(sets, caller, clock)
    if peak_bytes is not None:
        entry["peak_mem_bytes"] = {
            side: int(peak_bytes(plans[side][0]["fwdbwd"])) for side in sides
        }
    return copy_ms


def _host_us(
    sets: list[tuple], caller: Callable[[str, str], Callable[[int], Any]], clock: timing.Clock
) -> dict[str, Any]:
    """Host time per call (timing.host_time_us) of each side's fwd without autograd and
    fwd+bwd with it, and of ``x.mul(1.0)`` on the family's first input (a one-kernel torch
    op: the floor a call pays in Python and launch overhead), all in one interleaved run."""
    import torch

    def no_grad(fn: Callable[[int], Any]) -> Callable[[int], Any]:
        def call(k: int) -> Any:
            with torch.no_grad():
                return fn(k)

        return call

    firsts = [s[0] for s in sets]
    fns = {
        f"{d}.{side}": (no_grad if d == "fwd" else _same)(caller(side, d))
        for d in HOST_DIRECTIONS
        for side in ("candidate", "baseline")
    }
    if all(isinstance(x, torch.Tensor) for x in firsts):
        fns["torch_op"] = no_grad(lambda k: firsts[k % len(firsts)].mul(1.0))
    us = timing.host_time_us(fns, calls=HOST_CALLS, rounds=HOST_ROUNDS, clock=clock)
    out: dict[str, Any] = {"calls": HOST_CALLS, "rounds": HOST_ROUNDS}
    for d in HOST_DIRECTIONS:
        out[d] = {side: us[f"{d}.{side}"] for side in ("candidate", "baseline")}
    if "torch_op" in us:
        out["torch_op"] = us["torch_op"]
    return out


def _same(fn: Callable[[int], Any]) -> Callable[[int], Any]:
    return fn


def _no_poison(specs: list) -> None:
    return None


def _plan(fam: ModuleType, impl: Any, inputs: tuple) -> dict[str, Callable[[], Any]]:
    plan = fam.timed(impl, inputs)
    missing = [k for k in contract.TIMED_KEYS if not callable(plan.get(k))]
    if missing:
        raise LadderError(
            f"family {fam.FAMILY}: timed() returned no callable for {', '.join(missing)}; it "
            f"must return {{'fwd', 'bwd', 'fwdbwd'}} zero-argument callables"
        )
    return plan


# ------------------------------------------------------------------------------------------
# the run
# ------------------------------------------------------------------------------------------


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
        raise NoGpu(
            f"`ladder bench` needs a CUDA GPU ({why}); run it on the GPU machine, or check "
            f"correctness here with `python -m ladder check {opts.family} {prepared.folder} "
            f"--interpret`"
        )
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
