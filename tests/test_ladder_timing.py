"""Interleaved timing: block order, counts, rotation indices, warm-up, summaries."""

from __future__ import annotations

import numpy as np
import pytest

from ladder import timing


class TickClock:
    """A fake clock: every mark() advances by the cost of the call just made."""

    def __init__(self) -> None:
        self.now = 0.0
        self.pending = 0.0
        self.prepared: list[float | None] = []

    def mark(self) -> float:
        self.now += self.pending
        self.pending = 0.0
        return self.now

    def elapsed_ms(self, pairs):
        return [b - a for a, b in pairs]

    def before_block(self, host_ms):
        self.prepared.append(host_ms)


def test_blocks_interleave_and_alternate_order() -> None:
    clock = TickClock()
    calls: list[tuple[str, int]] = []

    def make(name: str, cost: float):
        def fn(i: int) -> None:
            calls.append((name, i))
            clock.pending += cost

        return fn

    blocks: list[tuple[str, int]] = []
    out = timing.time_interleaved(
        {"a": make("a", 1.0), "b": make("b", 3.0)},
        rounds=3,
        reps=4,
        warmup=2,
        clock=clock,
        on_block=lambda name, r: blocks.append((name, r)),
    )
    assert blocks == [("a", 0), ("b", 0), ("b", 1), ("a", 1), ("a", 2), ("b", 2)]
    # each name keeps its own counter; warm-up calls consume indices but are not timed
    assert [i for n, i in calls if n == "a"] == list(range(3 * (2 + 4)))
    first_block = calls[:6]
    assert first_block == [("a", k) for k in range(6)]
    assert len(out["a"]) == len(out["b"]) == 12
    # the warm-up cost lands before the first start mark of each block, never inside a pair
    assert out["a"] == [1.0] * 12 and out["b"] == [3.0] * 12
    # before each block: the host time of that callable's previous block (None at first)
    assert len(clock.prepared) == 6
    assert clock.prepared[:2] == [None, None]
    assert all(isinstance(v, float) and v >= 0 for v in clock.prepared[2:])


def test_wall_clock_measures_something() -> None:
    out = timing.time_interleaved(
        {"sum": lambda i: sum(range(1000 + i))}, rounds=2, reps=3, clock=timing.WallClock()
    )
    assert len(out["sum"]) == 6 and all(v >= 0 for v in out["sum"])


def test_rejects_empty_sampling() -> None:
    with pytest.raises(ValueError, match="rounds and reps"):
        timing.time_interleaved({"a": lambda i: None}, rounds=0, reps=1, clock=TickClock())


@pytest.mark.parametrize("values", [[3.0], [5.0, 1.0], [4.0, 1.0, 9.0, 2.0, 7.0, 7.5, 0.5]])
def test_summarize_matches_numpy(values: list[float]) -> None:
    s = timing.summarize(values)
    assert s["n"] == len(values)
    for key, q in (("median", 50), ("p20", 20), ("p80", 80)):
        assert s[key] == pytest.approx(float(np.percentile(values, q)))
    assert s["p20"] <= s["median"] <= s["p80"]
    with pytest.raises(ValueError):
        timing.percentile([], 50)


class BusyClock:
    """Records what the host-time measurement asks of a clock."""

    def __init__(self) -> None:
        self.events: list[object] = []

    def mark(self) -> float:
        raise AssertionError("host timing uses no device marks")

    def elapsed_ms(self, pairs):
        raise AssertionError("host timing reads no device times")

    def before_block(self, host_ms):
        self.events.append(("busy", host_ms))

    def settle(self):
        self.events.append("settle")


def test_host_time_is_per_call_host_time_with_the_device_kept_busy() -> None:
    import time

    clock = BusyClock()
    seen: dict[str, list[int]] = {"slow": [], "fast": []}

    def slow(i: int) -> None:
        seen["slow"].append(i)
        clock.events.append("call")
        time.sleep(0.002)

    def fast(i: int) -> None:
        seen["fast"].append(i)
        clock.events.append("call")

    us = timing.host_time_us({"slow": slow, "fast": fast}, calls=3, rounds=2, clock=clock)
    assert set(us) == {"slow", "fast"}
    assert 2000 <= us["slow"] < 20000  # sleeping 2 ms per call
    assert 0 < us["fast"] < us["slow"]
    assert seen == {"slow": [0, 1, 2, 3, 4, 5], "fast": [0, 1, 2, 3, 4, 5]}
    # each block: keep the device busy, the calls, then drain (outside the timed window);
    # the busy time of a name's later blocks follows its previous block's host time
    blocks = [e for e in clock.events if e != "call"]
    # (round 0: slow, fast; round 1 alternates: fast, slow)
    busy = blocks[0::2]
    assert busy[:2] == [("busy", None), ("busy", None)]
    assert all(e == "settle" for e in blocks[1::2]) and len(blocks) == 8
    assert busy[3][1] > 2 * 3  # slow's first block took over 6 ms on the host
    assert 0 < busy[2][1] < busy[3][1]  # fast's took less
    assert clock.events[:5] == [("busy", None), "call", "call", "call", "settle"]
    with pytest.raises(ValueError, match="calls and rounds must be >= 1"):
        timing.host_time_us({"f": fast}, calls=0, rounds=1, clock=clock)


@pytest.mark.gpu
def test_cuda_peak_bytes_sees_a_transient_allocation() -> None:
    import torch

    keep = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")  # allocated before: excluded

    def call() -> None:
        tmp = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
        tmp.fill_(1)
        del tmp

    peak = timing.cuda_peak_bytes(call)
    assert 256 << 20 <= peak < (256 + 32) << 20
    assert timing.cuda_peak_bytes(lambda: None) == 0
    del keep
