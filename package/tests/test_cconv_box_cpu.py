"""CPU checks of the cconv 002 kernels (every case of fla's causal_conv1d, and the decode
step) through Triton's interpreter on small shapes, against the fp64 reference in
cconv_reference.py, and of the dispatch that routes each case to them.

The kernels are the idea's source (`ladder/kernels/cconv/ideas/002-strip-box/kernel.py`),
which the vendor copies into `kernel_fun.cconv._kernels.strip2`; it is loaded here with the
interpreter on and autotuning off (the interpreter has no GPU driver to tune with).
"""

from __future__ import annotations

import importlib.util
import pathlib

import pytest
import torch
from cconv_reference import conv_reference, rel_err, update_reference

ROOT = pathlib.Path(__file__).resolve().parents[2]
IDEA = ROOT / "ladder/kernels/cconv/ideas/002-strip-box/kernel.py"

# Relative L2 bound against the fp64 reference, per x dtype: a few roundings of the output.
TOL = {torch.bfloat16: 1.2e-2, torch.float16: 1.5e-3, torch.float32: 2e-6}


@pytest.fixture(scope="module")
def box():
    """The 002 kernel module, interpreted: TRITON_INTERPRET=1 and CCONV_AUTOTUNE=0 while it
    is imported and while this module's tests run (Triton reads the switch at call time too)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_INTERPRET", "1")
        mp.setenv("CCONV_AUTOTUNE", "0")
        spec = importlib.util.spec_from_file_location("cconv_box_interpreted", IDEA)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        yield mod


def _make(B, T, D, W, xdt, wdt, bias, res, h0, dht, cu, seed=0):
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape, dtype):
        return torch.randn(*shape, generator=g).to(dtype)

    N = B if cu is None else len(cu) - 1
    return dict(
        x=rnd(B, T, D, dtype=xdt),
        w=(torch.randn(D, W, generator=g) * W**-0.5).to(wdt),
        dy=rnd(B, T, D, dtype=xdt),
        bias=rnd(D, dtype=wdt) if bias else None,
        residual=rnd(B, T, D, dtype=xdt) if res else None,
        h0=rnd(N, D, W, dtype=xdt) if h0 else None,
        dht=rnd(N, D, W, dtype=xdt) if dht else None,
        cu=torch.tensor(cu, dtype=torch.int32) if cu is not None else None,
    )


# (B, T, D, W, x dtype, w dtype, bias, residual, initial state, dht, activation, cu_seqlens)
BF, HF, F32 = torch.bfloat16, torch.float16, torch.float32
CASES = {
    "dense-bf16-w4": (2, 37, 40, 4, BF, F32, False, False, False, False, "silu", None),
    "dense-fp16-w2": (1, 5, 17, 2, HF, F32, False, False, False, False, "silu", None),
    "dense-fp32-w3-fp16w": (3, 64, 64, 3, F32, HF, False, False, False, False, "swish", None),
    "dense-w1-bf16w": (2, 19, 24, 1, BF, BF, False, False, False, False, "silu", None),
    "bias": (2, 37, 40, 4, BF, F32, True, False, False, False, "silu", None),
    "residual": (2, 37, 40, 4, HF, F32, False, True, False, False, "silu", None),
    "act-none-bias-residual": (2, 19, 24, 3, BF, F32, True, True, False, False, None, None),
    "state": (2, 37, 40, 4, F32, F32, False, False, True, True, "silu", None),
    "state-t1": (3, 1, 24, 4, F32, F32, True, False, True, True, "silu", None),
    "state-t2-short": (2, 2, 24, 4, HF, F32, False, False, True, True, None, None),
    "final-no-initial": (2, 3, 24, 3, F32, F32, False, False, False, True, "silu", None),
    "initial-no-final": (2, 33, 24, 4, BF, F32, True, True, True, False, "silu", None),
    "varlen": (1, 60, 24, 4, F32, F32, False, False, False, False, "silu", [0, 7, 30, 60]),
    "varlen-short-and-empty": (
        1, 60, 24, 4, F32, F32, True, False, True, True, "silu", [0, 1, 3, 3, 20, 22, 60],
    ),
    "varlen-everything-bf16": (
        1, 45, 40, 3, BF, F32, True, True, True, True, "swish", [0, 2, 19, 20, 45],
    ),
    "varlen-ones": (1, 9, 17, 4, F32, F32, False, True, True, True, None, list(range(10))),
    "varlen-w1": (1, 30, 24, 1, HF, F32, True, False, True, True, "silu", [0, 1, 29, 30]),
}  # fmt: skip


@pytest.mark.parametrize("name", list(CASES))
def test_every_case_matches_the_fp64_reference(box, name):
    B, T, D, W, xdt, wdt, bias, res, h0, dht, act, cu = CASES[name]
    a = _make(B, T, D, W, xdt, wdt, bias, res, h0, dht, cu)
    y, final = box.conv_fwd(
        a["x"], a["w"], a["bias"], a["residual"], a["h0"], dht, act, a["cu"]
    )  # the final state is asked for exactly when its gradient is tested
    dx, dw, db, dr, dh0 = box.conv_bwd(
        a["x"], a["w"], a["dy"], a["bias"], a["residual"], a["h0"], a["dht"], act, a["cu"]
    )
    ref = conv_reference(
        a["x"], a["w"], a["dy"], a["bias"], a["residual"], a["h0"], a["dht"], act, a["cu"]
    )
    tol = TOL[xdt]
    tol_w = max(tol, TOL[wdt])  # dw and db are rounded to the weight's dtype
    assert y.dtype == xdt and y.shape == a["x"].shape and y.is_contiguous()
    assert rel_err(y, ref["y"]) < tol
    assert dx.dtype == xdt and rel_err(dx, ref["dx"]) < tol
    assert dw.dtype == wdt and rel_err(dw, ref["dw"]) < tol_w
    if bias:
        assert db.dtype == wdt and rel_err(db, ref["db"]) < tol_w
    else:
        assert db is None
    assert (dr is a["dy"]) if res else dr is None
    if h0:
        assert dh0.dtype == xdt and rel_err(dh0, ref["dh0"]) < tol
    else:
        assert dh0 is None
    if dht:
        assert final.dtype == xdt and final.shape == ref["final"].shape
        # The final state is a copy of inputs: exact.
        assert torch.equal(final.to(torch.float64), ref["final"])
    else:
        assert final is None


def test_strided_inputs(box):
    """x, residual and dy as channel slices of wider tensors, dy with a zero stride."""
    B, T, D, W = 2, 29, 24, 4
    g = torch.Generator().manual_seed(3)
    x = torch.randn(B, T, 3 * D, generator=g).bfloat16()[:, :, D : 2 * D]
    res = torch.randn(B, 2 * D, T, generator=g).bfloat16().transpose(1, 2)[:, :, :D]
    w = torch.randn(D, W, generator=g)
    dy = torch.randn(1, 1, D, generator=g).bfloat16().expand(B, T, D)
    y, _ = box.conv_fwd(x, w, None, res, None, False, "silu", None)
    dx, dw, _, _, _ = box.conv_bwd(x, w, dy, None, res, None, None, "silu", None)
    ref = conv_reference(x, w, dy, residual=res)
    assert rel_err(y, ref["y"]) < TOL[torch.bfloat16]
    assert rel_err(dx, ref["dx"]) < TOL[torch.bfloat16]
    assert rel_err(dw, ref["dw"]) < 1e-5


def test_segments_cross_sequence_boundaries(box, monkeypatch):
    """Many short segments: every program starts inside some sequence and walks over
    several boundaries, the backward's halo crossing into the next sequence."""
    monkeypatch.setattr(box, "MIN_PROGRAMS", 1 << 20)
    a = _make(1, 96, 24, 4, F32, F32, True, False, True, True, [0, 5, 6, 17, 40, 41, 42, 96])
    y, final = box.conv_fwd(a["x"], a["w"], a["bias"], None, a["h0"], True, "silu", a["cu"])
    dx, dw, db, _, dh0 = box.conv_bwd(
        a["x"], a["w"], a["dy"], a["bias"], None, a["h0"], a["dht"], "silu", a["cu"]
    )
    assert box._segment(1, 96, 24, 256) == box.MIN_SEG_SMALL  # several segments
    ref = conv_reference(
        a["x"], a["w"], a["dy"], a["bias"], None, a["h0"], a["dht"], "silu", a["cu"]
    )  # noqa: E501
    for got, key in ((y, "y"), (dx, "dx"), (dw, "dw"), (db, "db"), (dh0, "dh0")):
        assert rel_err(got, ref[key]) < 2e-6, key
    assert torch.equal(final.double(), ref["final"])


def _silu_w1(box, x):
    """y = silu(x) and dx for dy = 1, through W = 1 with weight 1 (so z = x)."""
    x = x.view(1, -1, 1)
    w = torch.ones(1, 1)
    y, _ = box.conv_fwd(x, w, None, None, None, False, "silu", None)
    dx, *_ = box.conv_bwd(x, w, torch.ones_like(x), None, None, None, None, "silu", None)
    return y.view(-1), dx.view(-1)


def _silu_fp32(z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 silu and silu' of z, computed in fp64 and rounded once."""
    zd = z.double()
    s = torch.sigmoid(zd)
    return (zd * s).float(), (s * (1 + zd * (1 - s))).float()


def test_bf16_silu_negative_tail_is_exact(box):
    """z from -40 to -4 in steps of 1/16 (577 values, rounded to bf16 as x would be): the
    kernel's fp32 silu and silu' round to the same bf16 as fp32 silu and silu', element by
    element, and none is zero (001's tanh.approx form gave -0 for 385 of them). The bf16
    store itself is checked on the GPU: the interpreter's fp32 -> bf16 cast truncates."""
    z = torch.arange(-40 * 16, -4 * 16 + 1, dtype=torch.float32) / 16
    assert z.numel() == 577
    z = z.to(torch.bfloat16).float()
    y, dx = _silu_w1(box, z)
    want_y, want_dx = _silu_fp32(z)
    assert (y < 0).all() and (dx < 0).all()
    assert torch.equal(y.to(torch.bfloat16), want_y.to(torch.bfloat16))
    assert torch.equal(dx.to(torch.bfloat16), want_dx.to(torch.bfloat16))


def test_silu_stays_finite_and_exact_near_100(box):
    """x at +-100 and on the way there: finite, and within a few fp32 ulps of the correctly
    rounded silu and silu' (within 1e-5 relative where |z| log2 e > 96, where exp's argument
    itself carries that error; subnormal results to within a few subnormal steps): tiny
    negatives, not -0."""
    z = torch.tensor([-100.0, -99.0, -96.0, -70.0, -66.0, -4.0, 0.0, 4.0, 66.0, 96.0, 100.0])
    y, dx = _silu_w1(box, z)
    want_y, want_dx = _silu_fp32(z)
    assert torch.isfinite(y).all() and torch.isfinite(dx).all()
    tail = z.abs() > 66
    torch.testing.assert_close(y[~tail], want_y[~tail], rtol=4e-7, atol=0)
    torch.testing.assert_close(dx[~tail], want_dx[~tail], rtol=4e-7, atol=0)
    torch.testing.assert_close(y[tail], want_y[tail], rtol=1e-5, atol=1e-44)
    torch.testing.assert_close(dx[tail], want_dx[tail], rtol=1e-5, atol=1e-44)
    assert (y[:5] < 0).all()
    assert torch.equal(y.to(torch.bfloat16)[-3:], z[-3:].to(torch.bfloat16))


def test_nan_and_inf_propagate(box):
    """A NaN or Inf in x poisons the outputs that depend on it, as in fla (no clamping)."""
    a = _make(1, 16, 8, 4, F32, F32, False, False, False, False, None)
    x = a["x"].clone()
    x[0, 5, 3] = float("nan")
    x[0, 9, 2] = float("inf")
    y, _ = box.conv_fwd(x, a["w"], None, None, None, False, None, None)
    assert torch.isnan(y[0, 5:9, 3]).all() and torch.isfinite(y[0, :5, 3]).all()
    assert not torch.isfinite(y[0, 9:13, 2]).any() and torch.isfinite(y[0, 13:, 2]).all()
    dx, dw, *_ = box.conv_bwd(x, a["w"], a["dy"], None, None, None, None, None, None)
    assert torch.isnan(dw[3]).all() and torch.isfinite(dw[[0, 1, 4, 5]]).all()


@pytest.mark.parametrize(
    "xshape, res, bias, act, cdt",
    [
        ((3, 40), False, False, "silu", torch.float32),
        ((1, 3, 40), True, True, "silu", torch.bfloat16),
        ((3, 1, 40), True, False, None, torch.float16),
        ((2, 17), False, True, "swish", torch.float32),
    ],
)
def test_decode_step_matches_the_reference(box, xshape, res, bias, act, cdt):
    g = torch.Generator().manual_seed(5)
    D = xshape[-1]
    N = xshape[0] if len(xshape) == 2 else max(xshape[0], xshape[1])
    W = 4
    x = torch.randn(*xshape, generator=g).bfloat16()
    cache = torch.randn(N, D, W, generator=g).to(cdt)
    r = torch.randn(*xshape, generator=g).bfloat16() if res else None
    w = torch.randn(D, W, generator=g)
    b = torch.randn(D, generator=g) if bias else None
    want_y, want_cache = update_reference(x, cache, r, w, b, act)
    y, c = box.cconv_update(x, cache, r, w, b, act)
    assert c is cache  # updated in place
    assert y.shape == x.shape and y.dtype == x.dtype
    assert rel_err(y.reshape(N, D), want_y) < TOL[torch.bfloat16]
    assert torch.equal(cache.double(), want_cache.to(cdt).double())


def test_decode_refuses_a_cache_of_another_shape(box):
    with pytest.raises(ValueError, match="cache must be"):
        box.cconv_update(
            torch.randn(3, 8), torch.randn(3, 8, 3), None, torch.randn(8, 4), None, None
        )  # noqa: E501


def test_the_configuration_does_not_depend_on_the_exact_length(box):
    """Packed or varying lengths share an autotune key: the size term moves in powers of
    four only, and segments never exceed the call."""
    buckets = {box._work_bucket(T * 2048) for T in range(4097, 16385, 97)}
    assert len(buckets) <= 2
    for T in (1, 7, 100, 4096, 131072):
        ts = box._segment(1, T, 2048, 256)
        assert ts % box.SEG_ALIGN == 0 and ts <= max(T, box.SEG_ALIGN) + box.SEG_ALIGN


def test_small_calls_get_enough_programs(box):
    """B1 T4096 D768: 001 launched 192 programs; 002 sizes segments for MIN_PROGRAMS."""
    ts = box._segment(1, 4096, 768, 256)
    programs = 3 * -(-4096 // ts)
    assert programs >= box.MIN_PROGRAMS
    # large calls keep 001's segments (the prod path is unchanged)
    assert box._segment(16, 8192, 2048, 512) == 128


# ---------------------------------------------------------------- the dispatch (ops.py)


@pytest.fixture
def routed(box, monkeypatch):
    """kernel_fun.cconv with the 002 kernels as if vendored, on a device the gate admits:
    CPU tensors run the interpreted kernels through the real dispatch and autograd."""
    from kernel_fun._common import support
    from kernel_fun.cconv import ops

    monkeypatch.setattr(ops, "_box_mod", box)
    monkeypatch.setattr(ops.support, "triton_unsupported_reason", lambda t, family: None)
    for name in ("KERNEL_FUN_DISABLE", "KERNEL_FUN_CCONV_DISABLE"):
        monkeypatch.delenv(name, raising=False)
    support._reset_for_tests()
    return ops


@pytest.mark.parametrize(
    "name",
    [
        "bias",
        "act-none-bias-residual",
        "state-t2-short",
        "varlen-short-and-empty",
        "varlen-everything-bf16",
        "dense-fp32-w3-fp16w",
    ],
)  # noqa: E501
def test_causal_conv1d_gradients_through_autograd(routed, name):
    """The public entry point on our path: y, final state and every gradient (x, weight,
    bias, residual, initial state; dht into x and the state) against the reference."""
    from kernel_fun.cconv import causal_conv1d, is_supported

    B, T, D, W, xdt, wdt, bias, res, h0, dht, act, cu = CASES[name]
    a = _make(B, T, D, W, xdt, wdt, bias, res, h0, dht, cu)
    leaves = {
        k: a[k].clone().requires_grad_()
        for k in ("x", "w", "bias", "residual", "h0")
        if a[k] is not None
    }  # noqa: E501
    kw = dict(
        bias=leaves.get("bias"), residual=leaves.get("residual"), initial_state=leaves.get("h0"),
        output_final_state=dht, activation=act, cu_seqlens=a["cu"],
    )  # fmt: skip
    ok, reason = is_supported(leaves["x"], leaves["w"], **kw)
    assert ok, reason
    y, final = causal_conv1d(leaves["x"], leaves["w"], **kw)
    loss = (y.double() * a["dy"].double()).sum()
    if dht:
        loss = loss + (final.double() * a["dht"].double()).sum()
    loss.backward()
    ref = conv_reference(
        a["x"], a["w"], a["dy"], a["bias"], a["residual"], a["h0"], a["dht"], act, a["cu"]
    )  # noqa: E501
    tol = max(TOL[xdt], TOL[wdt])
    assert rel_err(y, ref["y"]) < tol
    names = {"x": "dx", "w": "dw", "bias": "db", "residual": "dr", "h0": "dh0"}
    for k, t in leaves.items():
        assert t.grad is not None and t.grad.dtype == t.dtype, k
        assert rel_err(t.grad, ref[names[k]]) < tol, k


def test_a_strided_bias_or_cu_seqlens_is_read_as_its_values(routed):
    """A bias or cu_seqlens that is a strided view (every other element of a wider tensor)
    gives the reference's y and gradients, the bias's gradient landing in the wider
    tensor's elements, in the forward and backward and (bias) in the decode step: the
    kernels read bias[d] and cu_seqlens[n] at offsets d and n, so the dispatch must hand
    them contiguous copies, as fla's input guard does."""
    from kernel_fun.cconv import causal_conv1d, causal_conv1d_update

    B, T, D, W = 2, 21, 24, 4
    a = _make(B, T, D, W, torch.float32, torch.float32, False, False, False, False, None)
    g = torch.Generator().manual_seed(7)
    wide = torch.randn(2 * D, generator=g).requires_grad_()
    bias = wide[::2]
    x = a["x"].clone().requires_grad_()
    y, _ = causal_conv1d(x, a["w"], bias=bias, activation="silu")
    (y * a["dy"]).sum().backward()
    ref = conv_reference(a["x"], a["w"], a["dy"], bias.detach(), activation="silu")
    assert rel_err(y, ref["y"]) < TOL[torch.float32]
    assert rel_err(x.grad, ref["dx"]) < TOL[torch.float32]
    assert rel_err(wide.grad[::2], ref["db"]) < TOL[torch.float32]
    assert torch.count_nonzero(wide.grad[1::2]) == 0

    # cu_seqlens as every other element of a wider tensor, read as its values too
    lens = [5, 1, 9, 6]
    offsets = [0, *torch.tensor(lens).cumsum(0).tolist()]
    wide_cu = torch.tensor([v for o in offsets for v in (o, -7)])
    xp = torch.randn(1, sum(lens), D, generator=g)
    dyp = torch.randn(1, sum(lens), D, generator=g)
    xp_leaf = xp.clone().requires_grad_()
    yp, _ = causal_conv1d(
        xp_leaf, a["w"], bias=bias.detach(), activation="silu", cu_seqlens=wide_cu[::2]
    )
    (yp * dyp).sum().backward()
    refp = conv_reference(xp, a["w"], dyp, bias.detach(), cu_seqlens=torch.tensor(offsets))
    assert rel_err(yp, refp["y"]) < TOL[torch.float32]
    assert rel_err(xp_leaf.grad, refp["dx"]) < TOL[torch.float32]

    xs = torch.randn(3, D, generator=g)
    cache = torch.randn(3, D, W, generator=g)
    want_y, _ = update_reference(xs, cache, None, a["w"], bias.detach(), "silu")
    y1, _ = causal_conv1d_update(xs, cache, None, a["w"], bias.detach(), "silu")
    assert rel_err(y1, want_y) < TOL[torch.float32]


def _gate_args(**over):
    g = torch.Generator().manual_seed(0)
    args = dict(
        x=torch.randn(2, 8, 16, generator=g).bfloat16(),
        weight=torch.randn(16, 4, generator=g),
        activation="silu",
    )
    args.update(over)
    return args


@pytest.mark.parametrize(
    "over",
    [
        {},
        {"bias": torch.zeros(16)},
        {"residual": torch.zeros(2, 8, 16)},
        {"initial_state": torch.zeros(2, 16, 4), "output_final_state": True},
        {"activation": None},
        {"activation": "swish", "output_final_state": None},
        {"x": torch.randn(2, 8, 16)},
        {"x": torch.randn(1, 8, 16).half(), "cu_seqlens": torch.tensor([0, 3, 8])},
        {"x": torch.randn(1, 8, 16), "cu_seqlens": torch.tensor([0, 8], dtype=torch.int32)},
        {"x": torch.randn(1, 8, 16), "cu_seqlens": torch.tensor([0, 1, 8]),
         "initial_state": torch.zeros(2, 16, 4)},
    ],
)  # fmt: skip
def test_the_gate_admits_every_case_of_the_box(routed, over):
    from kernel_fun.cconv import is_supported

    ok, reason = is_supported(**_gate_args(**over))
    assert ok, reason


@pytest.mark.parametrize(
    "over, needle",
    [
        ({"bias": torch.zeros(15)}, "bias"),
        ({"bias": torch.zeros(16, dtype=torch.int32)}, "bias"),
        ({"residual": torch.zeros(2, 8, 15)}, "residual"),
        ({"initial_state": torch.zeros(2, 16, 3)}, "initial_state"),
        ({"initial_state": torch.zeros(3, 16, 4)}, "initial_state"),
        ({"cu_seqlens": torch.tensor([0, 8])}, "cu_seqlens"),  # B = 2
        ({"x": torch.randn(1, 8, 16), "cu_seqlens": torch.tensor([0.0, 8.0])}, "cu_seqlens"),
        ({"x": torch.randn(1, 8, 16), "cu_seqlens": torch.tensor([[0, 8]])}, "cu_seqlens"),
        ({"cu_seqlens_cpu": torch.tensor([0, 8])}, "cu_seqlens_cpu"),
        ({"chunk_indices": torch.zeros(1, 2)}, "chunk_indices"),
        # beside cu_seqlens too, even exact: fla computes with them, our kernels without
        (
            {
                "x": torch.randn(1, 8, 16),
                "cu_seqlens": torch.tensor([0, 8]),
                "cu_seqlens_cpu": torch.tensor([0, 8]),
            },
            "cu_seqlens_cpu",
        ),
        (
            {
                "x": torch.randn(1, 8, 16),
                "cu_seqlens": torch.tensor([0, 8]),
                "chunk_indices": torch.tensor([[0, 0]]),
            },
            "chunk_indices",
        ),
        ({"output_final_state": 1}, "output_final_state"),
        ({"x": torch.randn(2, 8, 16).double()}, "dtype"),
        ({"weight": torch.randn(16, 5)}, "W=5"),
        ({"cp_context": object()}, "cp_context"),
        ({"backend": "cuda"}, "backend"),
    ],
)
def test_the_gate_refuses_what_is_outside_the_box(routed, over, needle):
    from kernel_fun.cconv import is_supported

    ok, reason = is_supported(**_gate_args(**over))
    assert not ok and needle in reason, reason


def test_without_the_002_kernels_only_001s_case_is_admitted(routed, monkeypatch):
    from kernel_fun.cconv import is_supported

    monkeypatch.setattr(routed, "_box_mod", None)
    assert is_supported(**_gate_args())[0]
    for over in ({"bias": torch.zeros(16)}, {"activation": None}, {"x": torch.randn(2, 8, 16)}):
        ok, reason = is_supported(**_gate_args(**over))
        assert not ok and "002" in reason, reason


def test_decode_step_through_the_dispatch(routed):
    from kernel_fun.cconv import causal_conv1d_update

    g = torch.Generator().manual_seed(2)
    x = torch.randn(1, 3, 24, generator=g).bfloat16()
    cache = torch.randn(3, 24, 4, generator=g).bfloat16()
    w, b = torch.randn(24, 4, generator=g), torch.randn(24, generator=g)
    want_y, want_cache = update_reference(x, cache, None, w, b, "silu")
    y, c = causal_conv1d_update(x, cache, None, w, b, "silu")
    assert c is cache and y.shape == x.shape
    assert rel_err(y.view(3, 24), want_y) < TOL[torch.bfloat16]
    assert torch.equal(cache.double(), want_cache.bfloat16().double())


def test_the_dense_case_takes_the_short_path_on_the_002_kernels(routed, box):
    """bf16 x, silu, no optional argument: the two-tensor Function, on 002's dense entry
    points once they are vendored."""
    from kernel_fun.cconv import causal_conv1d

    x = torch.randn(2, 21, 24).bfloat16().requires_grad_()
    w = torch.randn(24, 3).requires_grad_()
    y, final = causal_conv1d(x, w, activation="silu")
    assert final is None and type(y.grad_fn).__name__ == "_CausalConv1dSiluBackward"
    dy = torch.randn_like(y)
    y.backward(dy)
    ref = conv_reference(x, w, dy)
    assert rel_err(y, ref["y"]) < TOL[torch.bfloat16]
    assert rel_err(x.grad, ref["dx"]) < TOL[torch.bfloat16]
    assert rel_err(w.grad, ref["dw"]) < 1e-5


def test_is_supported_says_what_the_call_does_under_fla_drift(routed, monkeypatch):
    from kernel_fun._common import compat
    from kernel_fun.cconv import causal_conv1d, is_supported

    monkeypatch.setattr(compat, "engage", lambda family: False)
    calls = []
    monkeypatch.setattr(compat, "fla_causal_conv1d", lambda: lambda **kw: calls.append(kw))
    ok, reason = is_supported(**_gate_args())
    assert not ok and "fla drift" in reason
    causal_conv1d(**_gate_args())
    assert len(calls) == 1
