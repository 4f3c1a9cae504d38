"""Interleaved GPU timing with CUDA events, and summaries.

:func:`time_interleaved` times several named callables in alternating blocks, so slow drift
of the machine (clocks, temperature, other tenants) lands on all of them alike and cancels in
their ratios:

    for r in range(rounds):                       # block order alternates each round
        for name in names (reversed on odd r):
            warm-up calls (untimed)
            reps calls, each between two CUDA events, each on the next input index

A callable takes the call index ``i`` and uses input set ``i % n_sets``: the caller rotates
through enough input sets that the working set exceeds the L2 cache. Events are recorded back
to back on the current stream and read after one synchronize per block. Before each block's
timed calls the CUDA clock queues a GPU sleep somewhat longer than the host needed to enqueue
that callable's previous block, so the timed calls run back to back from a full queue: the
times are device time, not the host's launch overhead (which would otherwise dominate small
shapes, as it does not in a model whose host runs ahead of the GPU).

:func:`host_time_us` measures the other side: the host's cost per call (Python, argument
checks, launches), which bounds a small call in a model where the GPU waits on the host.
Each block queues the same GPU sleep first, so launches never wait on the device, then times
``calls`` back-to-back calls with ``time.perf_counter``; the synchronize that drains the
queue comes after the timed window. The per-call median over blocks is reported in us.
:func:`cuda_peak_bytes` is the memory side: the allocator's peak during one call above what
was allocated before it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

__all__ = [
    "Clock",
    "CudaClock",
    "WallClock",
    "cuda_peak_bytes",
    "host_time_us",
    "percentile",
    "summarize",
    "time_interleaved",
]


class Clock(Protocol):
    """A source of timestamps: mark() records one, elapsed_ms(marks) reads a block of them,
    before_block(host_ms) runs before a block's timed calls (host_ms: how long the host took
    to enqueue this callable's previous block, None for its first)."""

    def mark(self) -> Any: ...

    def elapsed_ms(self, pairs: Sequence[tuple[Any, Any]]) -> list[float]: ...

    def before_block(self, host_ms: float | None) -> None: ...


class CudaClock:
    """CUDA events on the current stream (``torch.cuda.Event(enable_timing=True)``), with a
    GPU sleep queued ahead of each block (module docstring). preload: False disables it."""

    FIRST_BLOCK_MS = 20.0  # sleep before a callable's first block (no host estimate yet)
    MAX_SLEEP_MS = 100.0

    def __init__(self, *, preload: bool = True) -> None:
        import torch

        self._torch = torch
        self._preload = preload and hasattr(torch.cuda, "_sleep")
        rate_khz = 0
        if self._preload:
            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            rate_khz = int(getattr(props, "clock_rate", 0) or 0)
        self._cycles_per_ms = (rate_khz or 1_980_000) * 1.0  # kHz = cycles per ms

    def before_block(self, host_ms: float | None) -> None:
        if not self._preload:
            return
        ms = self.FIRST_BLOCK_MS if host_ms is None else 1.5 * host_ms + 0.5
        self._torch.cuda._sleep(int(min(ms, self.MAX_SLEEP_MS) * self._cycles_per_ms))

    def mark(self) -> Any:
        ev = self._torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev

    def elapsed_ms(self, pairs: Sequence[tuple[Any, Any]]) -> list[float]:
        if pairs:
            pairs[-1][1].synchronize()
        return [float(a.elapsed_time(b)) for a, b in pairs]

    def settle(self) -> None:
        """Wait for the device to drain (outside any timed window)."""
        self._torch.cuda.synchronize()


class WallClock:
    """Host wall time (``time.perf_counter``); for tests and CPU-only callables."""

    def mark(self) -> float:
        return time.perf_counter()

    def elapsed_ms(self, pairs: Sequence[tuple[float, float]]) -> list[float]:
        return [(b - a) * 1e3 for a, b in pairs]

    def before_block(self, host_ms: float | None) -> None:
        return None

    def settle(self) -> None:
        return None


def time_interleaved(
    fns: Mapping[str, Callable[[int], Any]],
    *,
    rounds: int,
    reps: int,
    warmup: int = 1,
    clock: Clock | None = None,
    on_block: Callable[[str, int], None] | None = None,
) -> dict[str, list[float]]:
    """Time each callable ``rounds * reps`` times, interleaved in blocks (module docstring).

    fns: {name: f(i)}; each name keeps its own call counter i = 0, 1, ... (warm-up calls
    included), so consecutive timed calls see consecutive input sets. rounds, reps >= 1;
    warmup >= 0 untimed calls at the start of each block. clock: default CUDA events.
    on_block(name, round) is called after each block. Returns {name: [ms per call]}.
    Raises ValueError on a non-positive rounds or reps.
    """
    if rounds < 1 or reps < 1 or warmup < 0:
        raise ValueError(
            f"rounds and reps must be >= 1 and warmup >= 0, got {rounds}, {reps}, {warmup}"
        )
    clk = clock if clock is not None else CudaClock()
    names = list(fns)
    calls = dict.fromkeys(names, 0)
    host_ms: dict[str, float | None] = dict.fromkeys(names)
    prepare = getattr(clk, "before_block", None)
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            fn = fns[name]
            for _ in range(warmup):
                fn(calls[name])
                calls[name] += 1
            if prepare is not None:
                prepare(host_ms[name])
            t0 = time.perf_counter()
            pairs = []
            for _ in range(reps):
                start = clk.mark()
                fn(calls[name])
                pairs.append((start, clk.mark()))
                calls[name] += 1
            host_ms[name] = (time.perf_counter() - t0) * 1e3
            out[name].extend(clk.elapsed_ms(pairs))
            if on_block is not None:
                on_block(name, r)
    return out


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between order statistics
    (numpy's default). Raises ValueError on an empty sequence."""
    if not values:
        raise ValueError("percentile of no values")
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(ms: Sequence[float]) -> dict[str, float | int]:
    """{median, p20, p80, n} of a list of milliseconds."""
    return {
        "median": percentile(ms, 50),
        "p20": percentile(ms, 20),
        "p80": percentile(ms, 80),
        "n": len(ms),
    }


def host_time_us(
    fns: Mapping[str, Callable[[int], Any]],
    *,
    calls: int,
    rounds: int,
    clock: Clock | None = None,
) -> dict[str, float]:
    """Host microseconds per call of each callable (module docstring): ``rounds`` blocks per
    name, interleaved and alternating in order, each ``calls`` back-to-back calls after the
    clock's ``before_block`` (a queued GPU sleep on CUDA) and timed on the host only; the
    clock's ``settle()`` (a synchronize) follows each block, untimed. fns: {name: f(i)}, i
    counting each name's calls. Returns {name: median over blocks of block time / calls}.
    Raises ValueError on a non-positive calls or rounds."""
    if calls < 1 or rounds < 1:
        raise ValueError(f"calls and rounds must be >= 1, got {calls}, {rounds}")
    clk = clock if clock is not None else CudaClock()
    names = list(fns)
    count = dict.fromkeys(names, 0)
    host_ms: dict[str, float | None] = dict.fromkeys(names)
    per_call: dict[str, list[float]] = {n: [] for n in names}
    settle = getattr(clk, "settle", None)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            fn = fns[name]
            clk.before_block(host_ms[name])
            t0 = time.perf_counter()
            for _ in range(calls):
                fn(count[name])
                count[name] += 1
            elapsed = time.perf_counter() - t0
            if settle is not None:
                settle()
            host_ms[name] = elapsed * 1e3
            per_call[name].append(elapsed * 1e6 / calls)
    return {n: percentile(v, 50) for n, v in per_call.items()}


def cuda_peak_bytes(fn: Callable[[], Any]) -> int:
    """Peak bytes the CUDA caching allocator held during one ``fn()`` above what was
    allocated before it (``torch.cuda.max_memory_allocated`` after resetting the peak),
    on the current device; the call is synchronized on both sides."""
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return max(0, int(torch.cuda.max_memory_allocated()) - int(before))
