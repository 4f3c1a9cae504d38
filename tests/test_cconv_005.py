"""cconv idea 005's grid rule on the CPU: small calls on the fixed configuration get about
CCONV_MIN_PROGRAMS programs, everything else 004's segments (its kernels are 004's, checked by
`ladder check cconv 005 --interpret` and the GPU bench)."""

from __future__ import annotations

import pytest
import triton
from ladder.kernels.cconv.ideas.i004 import kernel as k4
from ladder.kernels.cconv.ideas.i005 import kernel as k5

import ladder  # noqa: F401  (the idea import finder)

BD = 4 * 32 * k5.FIXED_WARPS  # the fixed configuration's channel strip


def _programs(B: int, T: int, D: int, ts: int) -> int:
    return triton.cdiv(D, BD) * B * triton.cdiv(T, ts)


@pytest.mark.parametrize(
    "B, T, D", [(1, 4096, 768), (4, 2048, 2048), (1, 1, 2048), (1, 100, 64), (2, 37, 40)]
)
def test_small_calls_fill_the_gpu(B, T, D):
    ts4 = k4._segment(B, T, D)
    ts = k5._segment(B, T, D, small=True)
    assert ts % k4.SEG_ALIGN == 0 and k5.MIN_SEG_SMALL <= ts <= ts4
    if _programs(B, T, D, ts4) < k5.MIN_PROGRAMS:
        # as many programs as the rule allows: MIN_PROGRAMS, or one segment of the shortest
        # length per channel strip and row when the call is too small for that
        assert _programs(B, T, D, ts) >= min(
            k5.MIN_PROGRAMS // 2, _programs(B, T, D, k5.MIN_SEG_SMALL)
        ), (ts4, ts)
    else:
        assert ts == ts4


def test_the_b1_t4096_d768_forward_gets_eight_times_the_programs():
    """The call 001's record has at half fla's speed: 192 programs under 004's rule."""
    B, T, D = 1, 4096, 768
    assert _programs(B, T, D, k4._segment(B, T, D)) == 192
    assert _programs(B, T, D, k5._segment(B, T, D, small=True)) == 1536
