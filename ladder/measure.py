"""The measurement of one bench run: correctness, the copy ceiling, the interleaved timings,
host time and peak memory, written into a :class:`BenchState`.

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
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ladder import contract, timing
from ladder.check import check_shape
from ladder.paths import LadderError

if TYPE_CHECKING:
    from ladder.bench import BenchOptions

__all__ = [
    "COPY_MIN_BYTES",
    "HOST_CALLS",
    "HOST_DIRECTIONS",
    "HOST_ROUNDS",
    "MAX_ROTATION_SETS",
    "ROTATE_L2_FACTOR",
    "BenchState",
    "measure",
]

ROTATE_L2_FACTOR = 3.0  # input sets per timed block cover at least this many L2 sizes
MAX_ROTATION_SETS = 64
COPY_MIN_BYTES = 512 << 20
HOST_CALLS = 20  # back-to-back calls per host-time block
HOST_ROUNDS = 5
HOST_DIRECTIONS = ("fwd", "fwdbwd")


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
        state.progress(f"{shape.name}: baseline re-tune", 0)
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
    op: the floor a call pays in Python and launch overhead), without autograd and (for a
    float input) forward and backward through ``torch.autograd.grad``, all in one
    interleaved run."""
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
        if all(x.is_floating_point() for x in firsts):
            leaves = [x.detach().requires_grad_(True) for x in firsts]
            grads = [torch.ones_like(x) for x in firsts]

            def op_fwdbwd(k: int) -> Any:
                i = k % len(leaves)
                return torch.autograd.grad(leaves[i].mul(1.0), leaves[i], grads[i])

            fns["torch_op_fwdbwd"] = op_fwdbwd
    us = timing.host_time_us(fns, calls=HOST_CALLS, rounds=HOST_ROUNDS, clock=clock)
    out: dict[str, Any] = {"calls": HOST_CALLS, "rounds": HOST_ROUNDS}
    for d in HOST_DIRECTIONS:
        out[d] = {side: us[f"{d}.{side}"] for side in ("candidate", "baseline")}
    for key in ("torch_op", "torch_op_fwdbwd"):
        if key in us:
            out[key] = us[key]
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
