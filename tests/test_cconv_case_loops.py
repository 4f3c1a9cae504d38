"""cconv ideas 006 and 007 (the cases' forward and backward in 4-row groups) on Triton's CPU
interpreter: with the fast bf16 sigmoid off (the interpreter cannot run its inline PTX),
006's `case_fwd_kernel` and 007's `case_bwd_kernel` compute each element with the same
operations in the same order as idea 002's kernels, so every output (y, the final state,
dx, dw, db, dh0) must be bitwise equal to 002's, whose kernels are checked against the fp64
oracle on the GPU. The packed batches mix sequences long enough for the groups that skip
the per-row sequence work with length-1 and 2 ones that force the row-by-row path, and
dht puts the last W rows of every sequence on that path too. The bf16 fast path (004's
sigmoid) is checked against the oracle by `ladder check cconv 006` / `007` on the GPU.

Runs in a subprocess (`tests.interpreted.run_interpreted`).
"""

from __future__ import annotations

import textwrap

import pytest

from tests.interpreted import run_interpreted

SCRIPT = textwrap.dedent(
    r"""
    import itertools, json
    import torch
    import ladder  # the idea import finder
    from ladder.kernels.cconv.ideas.i006 import kernel as k6
    from ladder.kernels.cconv.ideas.i007 import kernel as k7
    from ladder.kernels.cconv.ideas.i002 import kernel as box

    import os
    assert k6.CASE_FWD and k7.CASE_BWD and not k6.k4.FAST_SIGMOID
    assert box.FIXED_G == k7.FIXED_G == int(os.environ["CCONV_FIXED_G"])
    out = []
    # sequence ends at 36 and 76 fall inside 8-row segments, at the start of a 4-row group
    lens = [1, 30, 2, 3, 40, 9, 17, 1, 64]
    combos = [
        # dtype, W, activation, bias, residual, h0, varlen, final state
        (torch.bfloat16, 4, "silu", True, True, False, False, False),
        (torch.bfloat16, 4, "silu", False, False, True, False, True),
        (torch.bfloat16, 4, "silu", False, False, False, True, True),
        (torch.bfloat16, 3, "silu", True, False, True, True, True),
        (torch.bfloat16, 2, None, False, True, True, True, False),
        (torch.bfloat16, 1, "swish", True, True, False, True, True),
        (torch.float16, 4, "silu", True, False, True, True, True),
        (torch.float16, 3, "silu", False, True, False, False, True),
        (torch.float32, 4, "silu", False, False, False, False, False),
        (torch.float32, 4, None, True, True, True, True, True),
        (torch.float32, 2, "silu", False, False, True, False, True),
    ]
    torch.manual_seed(0)
    # every combination leaves 004's dense case (x bf16/fp16, silu, no bias, state, packing or
    # residual), which 006 hands to 004's loop unchanged
    for dt, W, act, has_b, has_r, has_h0, varlen, fs in combos:
        D = 40  # not a multiple of the channel strip: the channel mask runs
        B, T = (1, sum(lens)) if varlen else (2, 45)  # 45: a ragged last segment
        # x as a channel slice of a wider tensor (a strided layout)
        x = torch.randn(B, T, D + 8).to(dt)[..., 4 : 4 + D]
        w = torch.randn(D, W)
        b = torch.randn(D) if has_b else None
        r = torch.randn(B, T, D).to(dt) if has_r else None
        cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist()) if varlen else None
        N = len(lens) if varlen else B
        h0 = torch.randn(N, D, W).to(dt) if has_h0 else None
        assert r is not None or not k6.k4._dense_case(x, act, b, h0, cu)
        got = k6.conv_fwd(x, w, b, r, h0, fs, act, cu)
        want = box.conv_fwd(x, w, b, r, h0, fs, act, cu)
        dy = torch.randn(B, T, D).to(dt)
        dht = torch.randn(N, D, W).to(dt) if fs else None
        got += k7.conv_bwd(x, w, dy, b, r, h0, dht, act, cu)
        want += box.conv_bwd(x, w, dy, b, r, h0, dht, act, cu)
        same = [
            (g is None and v is None) or (g is not None and v is not None and torch.equal(g, v))
            for g, v in zip(got, want)
        ]
        out.append({"combo": repr((str(dt), W, act, has_b, has_r, has_h0, varlen, fs)), "same": same,
                    "finite": all(bool(torch.isfinite(g.float()).all()) for g in got if g is not None)})
    print(json.dumps(out))
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("rows", ["4", "8"])
def test_case_loops_are_bitwise_002s_in_the_interpreter(rows: str) -> None:
    """rows: the fixed configuration's rows per loop step (G), one 4-row group or two."""
    env = {
        "CCONV_FAST_SIGMOID": "0",
        "CCONV_AUTOTUNE": "0",
        "CCONV_CASE_FWD": "1",
        "CCONV_CASE_BWD": "1",
        "CCONV_FIXED_G": rows,
    }
    rows = run_interpreted(SCRIPT, env=env)
    assert len(rows) == 11
    for row in rows:
        # y, final state, dx, dw, db, dresidual, dh0
        assert row["same"] == [True] * 7 and row["finite"], row
