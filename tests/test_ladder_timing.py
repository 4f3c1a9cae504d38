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
