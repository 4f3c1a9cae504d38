"""cconv idea 009 (compensated dw / db for fp32 x) on Triton's CPU interpreter.

- The kernel: on 512-row segments, dw's error against the fp64 oracle is well below that
  of 007's serial sum, with dx bitwise 007's; non-finite inputs give 007's non-finite
  pattern (an Inf must not turn into NaN through the compensation).
- The routes: fp32 x launches the compensated kernel; bf16 / fp16 calls give 008's bits.

Runs in a subprocess (`tests.interpreted.run_interpreted`).
"""

from __future__ import annotations

import textwrap

import pytest

from tests.interpreted import run_interpreted

KERNEL = textwrap.dedent(
    r"""
    import json
    import torch
    import triton
    import ladder  # the idea import finder
    from ladder.kernels.cconv.ideas.i002 import kernel as box
    from ladder.kernels.cconv.ideas.i007 import kernel as k7
    from ladder.kernels.cconv.ideas.i009 import kernel as k9

    def launch(kernel, x, w, dy, TS):
        B, T, D = x.shape
        W = w.shape[1]
        NS = triton.cdiv(T, TS)
        dx = torch.empty_like(x)
        dwp = torch.empty((B * NS, D, W))
        args = (x, w, w, w, w, dy, w, dx, dwp, dwp, T, D, B, TS, NS, box._work_bucket(B * T * D),
                *x.stride(), *dy.stride(), dx.stride(0), dx.stride(1))
        flags = dict(W=W, ACT=box.ACTIVATIONS["silu"], HAS_BIAS=False, HAS_H0=False,
                     HAS_DHT=False, VARLEN=False, EVEN_T=T % TS == 0, BD=16, G=4, num_warps=1)
        if kernel is k7.case_bwd_kernel:
            flags["FAST"] = False
        kernel[(1, NS, B)](*args, **flags)
        return dx, dwp.double().sum(0)

    def oracle(x, w, dy):
        W = w.shape[1]
        xd, wd = x.double(), w.double().requires_grad_()
        xp = torch.nn.functional.pad(xd, (0, 0, W - 1, 0))
        z = sum(wd[:, j] * xp[:, j : j + x.shape[1], :] for j in range(W))
        torch.nn.functional.silu(z).backward(dy.double())
        return wd.grad

    def same_nonfinite(a, b):
        return bool(torch.equal(a.isnan(), b.isnan()) and torch.equal(a.isinf(), b.isinf())
                    and torch.equal(a[a.isinf()], b[b.isinf()]))

    out = {"seeds": []}
    for seed in range(3):
        torch.manual_seed(seed)
        x = torch.randn(1, 1024, 16)
        w = torch.randn(16, 4) * 0.5
        dy = torch.randn(1, 1024, 16)
        ref = oracle(x, w, dy)
        dx7, dw7 = launch(k7.case_bwd_kernel, x, w, dy, 512)
        dx9, dw9 = launch(k9.case_bwd_kahan_kernel, x, w, dy, 512)
        err = lambda d: float((d - ref).norm() / ref.norm())
        out["seeds"].append({"same_dx": bool(torch.equal(dx7, dx9)), "e7": err(dw7),
                             "e9": err(dw9)})
    x = torch.randn(1, 64, 16)
    x[0, 5, 3] = float("inf")
    x[0, 40, 7] = float("-inf")
    x[0, 20, 9] = float("nan")
    dy = torch.randn(1, 64, 16)
    w = torch.randn(16, 4) * 0.5
    dx7, dw7 = launch(k7.case_bwd_kernel, x, w, dy, 32)
    dx9, dw9 = launch(k9.case_bwd_kahan_kernel, x, w, dy, 32)
    out["nonfinite"] = {"dx": same_nonfinite(dx7, dx9), "dw": same_nonfinite(dw7, dw9),
                        "dw_has_inf": bool(dw9.isinf().any()), "dw_has_nan": bool(dw9.isnan().any())}
    print(json.dumps(out))
    """
)

ROUTES = textwrap.dedent(
    r"""
    import json
    import torch
    import ladder  # the idea import finder
    from ladder.kernels.cconv.ideas.i008 import kernel as k8
    from ladder.kernels.cconv.ideas.i009 import kernel as k9

    launches = []

    class Watched:
        def __init__(self, kernel):
            self.kernel = kernel

        def __getitem__(self, grid):
            launches.append("009 bwd")
            return self.kernel[grid]

    k9.case_bwd_kahan_kernel = Watched(k9.case_bwd_kahan_kernel)

    def same(got, want):
        return all((g is None and v is None) or (g is not None and v is not None
                   and torch.equal(g, v)) for g, v in zip(got, want, strict=True))

    torch.manual_seed(0)
    out = []
    lens = [1, 30, 2, 3, 9]
    for dt, W, bias, varlen in ((torch.bfloat16, 4, True, False), (torch.float16, 3, False, True),
                                (torch.float32, 4, True, False), (torch.float32, 2, False, True)):
        B, T, D = (1, sum(lens), 40) if varlen else (2, 37, 40)
        x = torch.randn(B, T, D).to(dt)
        w = torch.randn(D, W)
        b = torch.randn(D) if bias else None
        cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist()) if varlen else None
        N = len(lens) if varlen else B
        h0 = torch.randn(N, D, W).to(dt) if varlen else None
        dht = torch.randn(N, D, W).to(dt) if varlen else None
        dy = torch.randn(B, T, D).to(dt)
        launches.clear()
        got = k9.conv_bwd(x, w, dy, b, None, h0, dht, "silu", cu)
        want = k8.conv_bwd(x, w, dy, b, None, h0, dht, "silu", cu)
        row = {"dtype": str(dt), "launches": list(launches), "same": same(got, want),
               "same_dx_dh0": same((got[0], got[4]), (want[0], want[4]))}
        if dt == torch.float32:
            row["dw_close"] = bool(torch.allclose(got[1], want[1], rtol=1e-5, atol=1e-5))
        out.append(row)
    print(json.dumps(out))
    """
)


@pytest.mark.slow
def test_compensated_dw_is_closer_to_the_oracle_with_the_same_dx() -> None:
    res = run_interpreted(KERNEL)
    for row in res["seeds"]:
        assert row["same_dx"], row
        # 007's serial sum over 512 rows against 128 compensated group sums: 4-5x closer on
        # the interpreter (NOTES.md); half is the least this change must give
        assert row["e9"] < 0.5 * row["e7"], row
        assert row["e9"] < 2e-7, row
    nf = res["nonfinite"]
    assert nf["dx"] and nf["dw"], nf
    assert nf["dw_has_inf"] or nf["dw_has_nan"], nf  # the inputs did reach dw


@pytest.mark.slow
def test_fp32_x_takes_the_compensated_kernel_and_the_rest_is_008s() -> None:
    rows = run_interpreted(ROUTES, env={"CCONV_FAST_SIGMOID": "0", "CCONV_AUTOTUNE": "0"})
    assert [r["dtype"] for r in rows] == [
        "torch.bfloat16", "torch.float16", "torch.float32", "torch.float32",
    ]  # fmt: skip
    for row in rows:
        if row["dtype"] == "torch.float32":
            assert row["launches"] == ["009 bwd"], row
            assert row["same_dx_dh0"] and row["dw_close"], row
        else:
            assert row["launches"] == [] and row["same"], row
