"""The cconv family contract: the fp64 oracle, inputs, shapes, bytes, autograd wiring."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from ladder.check import rel_err
from ladder.kernels.cconv import family

REPO = Path(__file__).resolve().parents[1]


def _torch_reference(x, w, dy):
    """conv1d(groups=D, padding=W-1) + silu in float64, gradients by autograd."""
    xd = x.detach().to(torch.float64).requires_grad_(True)
    wd = w.detach().to(torch.float64).requires_grad_(True)
    T, W = x.shape[1], w.shape[1]
    z = F.conv1d(xd.transpose(1, 2), wd.unsqueeze(1), padding=W - 1, groups=w.shape[0])
    y = F.silu(z[..., :T]).transpose(1, 2)
    dx, dw = torch.autograd.grad(y, (xd, wd), dy.to(torch.float64))
    return y.detach(), dx, dw


@pytest.mark.parametrize(
    ("B", "T", "D", "W"),
    [(2, 37, 40, 4), (1, 5, 17, 2), (3, 16, 8, 3), (2, 9, 6, 1), (1, 2, 5, 4), (2, 1, 3, 3)],
)
def test_reference_matches_conv1d_autograd(B: int, T: int, D: int, W: int) -> None:
    shape = family.Shape("t", B, T, D, W, "float64", "float64")
    x, w, dy = family.make_inputs(shape, "cpu", seed=B * 1000 + T * 10 + W)
    y, dx, dw = family.reference(x, w, dy)
    ry, rdx, rdw = _torch_reference(x, w, dy)
    for got, want in ((y, ry), (dx, rdx), (dw, rdw)):
        assert got.dtype == torch.float64
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_reference_tap_convention_last_tap_is_the_current_row() -> None:
    # One channel, W=3: y[t] = silu(w0*x[t-2] + w1*x[t-1] + w2*x[t]).
    x = torch.tensor([[[1.0], [10.0], [100.0], [1000.0]]], dtype=torch.float64)
    w = torch.tensor([[0.5, -0.25, 0.125]], dtype=torch.float64)
    y, _, _ = family.reference(x, w, torch.ones_like(x))
    z = torch.tensor([0.125, 0.125 * 10 - 0.25, 0.125 * 100 - 0.25 * 10 + 0.5, 125 - 25 + 5])
    torch.testing.assert_close(y.flatten(), F.silu(z.double()))


def test_reference_handles_strides_and_low_precision() -> None:
    shape = family.Shape("t", 2, 33, 24, 4)
    x, w, dy = family.make_inputs(shape, "cpu", seed=5)
    xs, _, dys = family.strided((x, w, dy))
    assert not xs.is_contiguous() and not dys.is_contiguous()
    for a, b in zip(family.reference(x, w, dy), family.reference(xs, w, dys), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    ry, rdx, rdw = _torch_reference(x, w, dy)
    y, dx, dw = family.reference(x, w, dy)
    assert rel_err(y, ry) < 1e-12 and rel_err(dx, rdx) < 1e-12 and rel_err(dw, rdw) < 1e-12


def test_make_inputs_is_seeded_fresh_and_typed() -> None:
    shape = family.Shape("t", 2, 8, 16, 3, "float16", "bfloat16")
    a = family.make_inputs(shape, "cpu", 1)
    b = family.make_inputs(shape, "cpu", 1)
    c = family.make_inputs(shape, "cpu", 2)
    for ta, tb, tc in zip(a, b, c, strict=True):
        assert torch.equal(ta, tb)
        assert not torch.equal(ta, tc)
        assert bool((ta != 0).any())
    x, w, dy = a
    assert x.shape == dy.shape == (2, 8, 16) and w.shape == (16, 3)
    assert x.dtype == dy.dtype == torch.float16 and w.dtype == torch.bfloat16
    assert not torch.equal(x, dy)


def test_shapes_follow_the_contract() -> None:
    (prod,) = family.SHAPES["prod"]
    assert (prod.B, prod.T, prod.D, prod.W, prod.x_dtype, prod.w_dtype) == (
        16, 8192, 2048, 4, "bfloat16", "float32",
    )  # fmt: skip
    sweep = {(s.B, s.T, s.D, s.W) for s in family.SHAPES["sweep"]}
    assert {
        (16, 8192, 1024, 4),
        (16, 8192, 4096, 4),
        (4, 2048, 2048, 4),
        (1, 4096, 768, 4),
    } <= sweep
    assert {(16, 1000, 2048, 4), (16, 8192, 2048, 2), (16, 8192, 2048, 3)} <= sweep
    small = family.SHAPES["small"]
    assert {s.x_dtype for s in small} >= {"float16", "bfloat16"}
    assert {s.W for s in small} >= {2, 3, 4}
    names = [s.name for v in family.SHAPES.values() for s in v]
    assert len(names) == len(set(names))
    assert family.ENTRY_POINTS == ("cconv_fwd", "cconv_bwd")
    assert family.TOLERANCES == {"y": 5e-3, "dx": 8e-3, "dw": 2e-2}


def test_min_bytes_counts_element_sizes() -> None:
    s = family.Shape("t", 2, 10, 8, 4, "bfloat16", "float32")
    n = 2 * 10 * 8
    assert family.min_bytes(s, "fwd") == n * 2 + n * 2 + 8 * 4 * 4
    assert family.min_bytes(s, "bwd") == 3 * n * 2 + 2 * 8 * 4 * 4
    s16 = family.Shape("t", 2, 10, 8, 4, "float16", "float16")
    assert family.min_bytes(s16, "fwd") == 4 * n + 8 * 4 * 2
    with pytest.raises(ValueError, match="direction"):
        family.min_bytes(s, "fwdbwd")


def test_autograd_apply_calls_the_pair() -> None:
    shape = family.Shape("t", 2, 12, 6, 3, "float64", "float64")
    x, w, dy = family.make_inputs(shape, "cpu", 3)
    calls = []

    def fwd(x, w):
        calls.append("fwd")
        return family.reference(x, w, torch.zeros_like(x))[0]

    def bwd(x, w, dy):
        calls.append("bwd")
        _, dx, dw = family.reference(x, w, dy)
        return dx, dw

    xl, wl = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    y = family.autograd_apply(fwd, bwd, xl, wl)
    dx, dw = torch.autograd.grad(y, (xl, wl), dy)
    assert calls == ["fwd", "bwd"]
    ry, rdx, rdw = _torch_reference(x, w, dy)
    torch.testing.assert_close(y.detach(), ry)
    torch.testing.assert_close(dx, rdx)
    torch.testing.assert_close(dw, rdw)


@pytest.mark.slow
def test_fla_forward_kernel_agrees_with_the_oracle_on_the_interpreter() -> None:
    """fla's own forward kernel (its JIT function with one explicit configuration, which
    Triton's CPU interpreter can run) against the oracle: confirms the tap convention."""
    code = textwrap.dedent(
        """
        import torch, triton
        from fla.modules.causal_conv1d import ops
        from ladder.kernels.cconv import family
        from triton.runtime.autotuner import Autotuner, Heuristics
        jit = ops.causal_conv1d_fwd_kernel
        while isinstance(jit, (Autotuner, Heuristics)):
            jit = jit.fn
        for (B, T, D, W) in [(2, 37, 40, 4), (1, 9, 16, 3), (2, 20, 8, 2)]:
            s = family.Shape("t", B, T, D, W, "float32", "float32")
            x, w, dy = family.make_inputs(s, "cpu", 11)
            y = torch.empty_like(x)
            BT = 16
            jit[(triton.cdiv(D, 16), triton.cdiv(T, BT), B)](
                x=x, y=y, weight=w, bias=None, residual=None, cu_seqlens=None,
                initial_state=None, chunk_indices=None, B=B, T=T,
                stride_x_n=x.stride(0), stride_x_t=x.stride(1), stride_x_d=x.stride(2),
                D=D, W=W, BT=BT, BW=triton.next_power_of_2(W), BD=16, ACTIVATION="silu",
                HAS_WEIGHT=True, HAS_BIAS=False, HAS_RESIDUAL=False,
                USE_INITIAL_STATE=False, IS_VARLEN=False)
            ref = family.reference(x, w, dy)[0]
            flipped = family.reference(x, w.flip(1), dy)[0]
            print(float((y.double() - ref).abs().max()), float((y.double() - flipped).abs().max()))
        """
    )
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [tuple(map(float, line.split())) for line in proc.stdout.strip().splitlines()]
    assert len(rows) == 3
    for same, flipped in rows:
        assert same < 1e-5
        assert flipped > 1e-2


def test_baseline_retune_forgets_fla_conv_picks_and_its_disk_cache() -> None:
    """fla's conv autotuners (keyed on D and W only, picks kept on disk by default) are made
    to tune again: disk cache off, in-memory picks gone, every other autotuner untouched."""
    from triton.runtime.autotuner import Autotuner

    ops = family._ops()

    def tuner(obj):
        while obj is not None and not isinstance(obj, Autotuner):
            obj = getattr(obj, "fn", None)
        return obj

    fwd, bwd = tuner(ops.causal_conv1d_fwd_kernel), tuner(ops.causal_conv1d_bwd_kernel)
    assert fwd is not None and bwd is not None
    saved = [(t, t.cache_results, dict(t.cache)) for t in (fwd, bwd)]
    try:
        for t in (fwd, bwd):
            t.cache_results = True
            t.cache[(2048, 4)] = t.configs[0]
        reset = family.baseline_retune()
        assert {"causal_conv1d_fwd_kernel", "causal_conv1d_bwd_kernel"} <= set(reset)
        for t in (fwd, bwd):
            assert t.cache_results is False and t.cache == {}
        assert all(tuner(getattr(ops, name)) is not None for name in reset)
    finally:
        for t, flag, cache in saved:
            t.cache_results = flag
            t.cache.clear()
            t.cache.update(cache)
