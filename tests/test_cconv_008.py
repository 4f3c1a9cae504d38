"""cconv idea 008 (007's case loops with 005's dense grid) on Triton's CPU interpreter: every
call runs the kernel of the idea that owns its case, on that idea's grid, and gives that
idea's bits.

- Dense calls (x bf16 / fp16, silu, no bias, initial state or packing; a forward without a
  residual, a backward without dht) launch 004's loop on 005's grid, whose segments are
  shorter than 004's on these small shapes.
- Every other call launches 006's case forward and 007's case backward, never 002's kernels.

The launches are watched (each kernel wrapped), because the outputs alone cannot tell the
routes apart: with the fast sigmoid off (the interpreter cannot run its inline PTX) 006 and
007 are bitwise 002's, and 004's forward gives the same bits on either grid. The outputs
are checked against the fp64 oracle by `ladder check cconv 008 --interpret`.

Runs in a subprocess (`tests.interpreted.run_interpreted`).
"""

from __future__ import annotations

import textwrap

import pytest

from tests.interpreted import run_interpreted

SCRIPT = textwrap.dedent(
    r"""
    import json
    import torch
    import triton
    import ladder  # the idea import finder
    from ladder.kernels.cconv.ideas.i002 import kernel as box
    from ladder.kernels.cconv.ideas.i004 import kernel as k4
    from ladder.kernels.cconv.ideas.i005 import kernel as k5
    from ladder.kernels.cconv.ideas.i006 import kernel as k6
    from ladder.kernels.cconv.ideas.i007 import kernel as k7
    from ladder.kernels.cconv.ideas.i008 import kernel as k8

    launches = []

    class Watched:
        def __init__(self, name, kernel):
            self.name, self.kernel = name, kernel

        def __getitem__(self, grid):
            launches.append([self.name, list(grid) if isinstance(grid, tuple) else None])
            return self.kernel[grid]

    for mod, attr, name in (
        (k4, "cconv_fwd_kernel", "004 fwd"), (k4, "cconv_bwd_kernel", "004 bwd"),
        (k6, "case_fwd_kernel", "006 fwd"), (k7, "case_bwd_kernel", "007 bwd"),
        (box, "cconv_fwd_kernel", "002 fwd"), (box, "cconv_bwd_kernel", "002 bwd"),
    ):
        setattr(mod, attr, Watched(name, getattr(mod, attr)))

    def same(got, want):
        return all(
            (g is None and v is None)
            or (g is not None and v is not None and torch.equal(g, v))
            for g, v in zip(got, want, strict=True)
        )

    def run(fn, *args):
        launches.clear()
        got = fn(*args)
        return got, [list(x) for x in launches]

    torch.manual_seed(0)
    out = []
    lens = [1, 30, 2, 3, 9]
    combos = [
        # dtype, W, activation, bias, residual, h0, varlen, final state, dht
        (torch.bfloat16, 4, "silu", False, False, False, False, False, False),  # dense
        (torch.float16, 3, "swish", False, False, False, False, True, False),  # dense + hT
        (torch.bfloat16, 4, "silu", False, True, False, False, False, False),  # residual
        (torch.bfloat16, 4, "silu", False, False, False, False, True, True),  # dense + dht
        (torch.bfloat16, 4, "silu", True, False, False, False, False, False),
        (torch.bfloat16, 2, None, False, False, True, True, True, True),
        (torch.float32, 4, "silu", False, False, False, False, False, False),
    ]
    for dt, W, act, has_b, has_r, has_h0, varlen, fs, has_dht in combos:
        D = 300  # two channel strips of the fixed configuration, the second one ragged
        B, T = (1, sum(lens)) if varlen else (2, 64)
        x = torch.randn(B, T, D + 8).to(dt)[..., 4 : 4 + D]
        w = torch.randn(D, W)
        b = torch.randn(D) if has_b else None
        r = torch.randn(B, T, D).to(dt) if has_r else None
        cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist()) if varlen else None
        N = len(lens) if varlen else B
        h0 = torch.randn(N, D, W).to(dt) if has_h0 else None
        dy = torch.randn(B, T, D).to(dt)
        dht = torch.randn(N, D, W).to(dt) if has_dht else None
        dense = k4._dense_case(x, act, b, h0, cu)
        got_f, fwd = run(k8.conv_fwd, x, w, b, r, h0, fs, act, cu)
        got_b, bwd = run(k8.conv_bwd, x, w, dy, b, r, h0, dht, act, cu)
        owner_f = k5.conv_fwd if dense and r is None else k6.conv_fwd
        owner_b = k5.conv_bwd if dense and dht is None else k7.conv_bwd
        row = {
            "combo": repr((str(dt), W, act, has_b, has_r, has_h0, varlen, fs, has_dht)),
            "fwd": fwd,
            "bwd": bwd,
            "same_fwd": same(got_f, owner_f(x, w, b, r, h0, fs, act, cu)),
            "same_bwd": same(got_b, owner_b(x, w, dy, b, r, h0, dht, act, cu)),
            "ns5": triton.cdiv(T, k5._segment(B, T, D, True)),
            "ns4": triton.cdiv(T, k4._segment(B, T, D)),
            "nd": triton.cdiv(D, 4 * 32 * k5.FIXED_WARPS),
            "B": B,
        }
        if dense:
            _, row["entry_fwd"] = run(k8.cconv_fwd, x, w)
            _, row["entry_bwd"] = run(k8.cconv_bwd, x, w, dy)
        out.append(row)
    print(json.dumps(out))
    """
)


@pytest.mark.slow
def test_each_case_runs_the_kernel_and_grid_of_the_idea_that_owns_it() -> None:
    env = {"CCONV_FAST_SIGMOID": "0", "CCONV_AUTOTUNE": "0", "CCONV_SMALL_BWD": "0"}
    rows = run_interpreted(SCRIPT, env=env)
    assert len(rows) == 7
    kinds = [([n for n, _ in r["fwd"]], [n for n, _ in r["bwd"]]) for r in rows]
    assert kinds == [
        (["004 fwd"], ["004 bwd"]),
        (["004 fwd"], ["004 bwd"]),
        (["006 fwd"], ["004 bwd"]),  # a residual: the case forward; its gradient is dy
        (["004 fwd"], ["007 bwd"]),  # dht: the case backward
        (["006 fwd"], ["007 bwd"]),
        (["006 fwd"], ["007 bwd"]),
        (["006 fwd"], ["007 bwd"]),
    ]
    for row in rows:
        assert row["same_fwd"] and row["same_bwd"], row
        small_grid = [row["nd"], row["ns5"], row["B"]]
        assert row["ns5"] != row["ns4"], row  # the two grids differ at these shapes
        if row["fwd"][0][0] == "004 fwd":
            assert row["fwd"][0][1] == small_grid, row
        if "entry_fwd" in row:
            assert row["entry_fwd"] == [["004 fwd", small_grid]], row
            assert [n for n, _ in row["entry_bwd"]] == ["004 bwd"], row
