"""GPU checks of kernel_fun.cconv against an fp64 oracle and against fla (run: make gpu-test).

Tolerances: relative L2 error against the fp64 oracle of at most 5e-3 (y), 8e-3 (dx) and
2e-2 (dw), and no more than 10% above fla's own error on the same inputs.
"""

from __future__ import annotations

import random
import types

import pytest
import torch

pytestmark = pytest.mark.gpu

fla_ops = pytest.importorskip("fla.modules.causal_conv1d.ops")

from kernel_fun._common import support  # noqa: E402
from kernel_fun.cconv import causal_conv1d, is_supported, ops, warmup  # noqa: E402

TOL = {"y": 5e-3, "dx": 8e-3, "dw": 2e-2}
RATIO = 1.10
SLACK = 1e-6
# This build's own conv kernels by direction, named as the vendored idea names them.
OURS = ops.kernel_names()
OUR_KERNELS = OURS["fwd"] + OURS["bwd"] + OURS["other"]
FLA_KERNELS = ("causal_conv1d_fwd_kernel", "causal_conv1d_bwd_kernel")
bf16, f16, f32 = torch.bfloat16, torch.float16, torch.float32


# ----------------------------------------------------------------------------------------
# references
# ----------------------------------------------------------------------------------------


def _shift(t: torch.Tensor, j: int) -> torch.Tensor:
    """out[:, r] = t[:, r - j] along dim 1 (zeros where r - j falls outside)."""
    if j == 0:
        return t
    out = torch.zeros_like(t)
    if j > 0:
        out[:, j:] = t[:, :-j]
    else:
        out[:, :j] = t[:, -j:]
    return out


def oracle(x: torch.Tensor, w: torch.Tensor, dy: torch.Tensor):
    """fp64 y, dx, dw of y = silu(causal depthwise conv), written from the definition:
    the tap for x[t - j] is w[:, W-1-j]."""
    x, w, dy = x.double(), w.double(), dy.double()
    W = w.shape[1]
    z = sum(w[:, W - 1 - j] * _shift(x, j) for j in range(W))
    s = torch.sigmoid(z)
    y = z * s
    g = dy * s * (1 + z * (1 - s))
    dx = sum(w[:, W - 1 - j] * _shift(g, -j) for j in range(W))
    dw = torch.stack([(g * _shift(x, W - 1 - k)).sum((0, 1)) for k in range(W)], dim=1)
    return y, dx, dw


def rel(a: torch.Tensor, ref: torch.Tensor) -> float:
    a = a.double()
    assert torch.isfinite(a).all(), "non-finite output"
    return ((a - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def run(fn, x, w, dy):
    xl = x.detach().requires_grad_()
    wl = w.detach().requires_grad_()
    y, state = fn(xl, wl, activation="silu")
    assert state is None
    y.backward(dy)
    return y.detach(), xl.grad, wl.grad


def make(B, T, D, W, xdt, wdt, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(B, T, D, device="cuda", generator=g).to(xdt)
    w = (torch.randn(D, W, device="cuda", generator=g) / W**0.5).to(wdt)
    dy = torch.randn(B, T, D, device="cuda", generator=g).to(xdt)
    return x, w, dy


def check_against_oracle_and_fla(x, w, dy, label=""):
    ours = run(causal_conv1d, x, w, dy)
    theirs = run(fla_ops.causal_conv1d, x, w, dy)
    ref = oracle(x, w, dy)
    assert ours[0].dtype == x.dtype and ours[1].dtype == x.dtype and ours[2].dtype == w.dtype
    assert ours[0].is_contiguous()
    for name, o, f, r in zip(("y", "dx", "dw"), ours, theirs, ref):
        e_ours, e_fla = rel(o, r), rel(f, r)
        assert e_ours <= TOL[name], f"{label} {name}: err {e_ours:.3e} > {TOL[name]}"
        assert e_ours <= RATIO * e_fla + SLACK, (
            f"{label} {name}: err {e_ours:.3e} vs fla {e_fla:.3e} (> {RATIO}x)"
        )


def kernels_launched(fn) -> set[str]:
    """Names of the CUDA kernels `fn` launched (torch.profiler). Profile warm calls only:
    a first call at a new shape also records every autotuning trial launch."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    cuda = torch.autograd.DeviceType.CUDA
    return {e.name for e in prof.events() if e.device_type == cuda}


def any_named(names: set[str], needles) -> bool:
    return any(n in name for name in names for n in needles)


def any_exactly(names: set[str], kernels) -> bool:
    """Whether one of `kernels` ran (Triton kernels run under their function's exact name;
    a substring would take fla's compute_dh0_kernel for our dh0_kernel)."""
    return not set(names).isdisjoint(kernels)


# ----------------------------------------------------------------------------------------
# parity: every value of each axis, and the risky pairs
# ----------------------------------------------------------------------------------------

# Five (D, W, x dtype, w dtype) keys cover every D, W and dtype; B and T vary across them.
# Each key costs fla (and us) one autotune, so the risky pairs reuse keys: tiny T with the
# widest W, ragged T with an unaligned D, fp16 at full length, and the production call.
K_PROD = (2048, 4, bf16, f32)
K_ODD = (100, 4, f16, f32)
K_NARROW = (256, 3, bf16, bf16)
K_FP16 = (1024, 2, f16, f32)
K_WIDE = (4096, 1, bf16, f32)
CASES = [
    (1, 1, *K_ODD),
    (3, 2, *K_NARROW),
    (16, 3, *K_FP16),
    (1, 15, *K_WIDE),
    (3, 64, *K_PROD),
    (16, 1000, *K_ODD),  # ragged T, D not a multiple of any strip
    (1, 1000, *K_WIDE),
    (3, 8192, *K_FP16),
    (16, 8192, *K_PROD),  # the production call
    (1, 8192, *K_NARROW),
    (3, 1000, *K_PROD),
    (16, 64, *K_NARROW),
    (1, 2, *K_PROD),
    (16, 1, *K_PROD),
    (3, 15, *K_ODD),
    (16, 1000, *K_WIDE),
    (1, 3, *K_ODD),
]


@pytest.mark.parametrize("B,T,D,W,xdt,wdt", CASES, ids=lambda v: str(v).replace("torch.", ""))
def test_parity_with_oracle_and_fla(B, T, D, W, xdt, wdt):
    x, w, dy = make(B, T, D, W, xdt, wdt, seed=B * 7 + T + D + W)
    ok, reason = is_supported(x, w, activation="silu")
    assert ok, reason
    check_against_oracle_and_fla(x, w, dy, f"B{B} T{T} D{D} W{W} {xdt} {wdt}")


# ----------------------------------------------------------------------------------------
# layouts of x and dy
# ----------------------------------------------------------------------------------------


def _layout(kind: str, B: int, T: int, D: int, dtype):
    """x of `kind`, and the (strides, storage offset) that kind must have."""
    g = torch.Generator(device="cuda").manual_seed(11)
    if kind == "contiguous":
        x = torch.randn(B, T, D, device="cuda", generator=g).to(dtype)
        return x, ((T * D, D, 1), 0)
    if kind == "channel-slice":  # q of a fused [B, T, 3D] projection output
        x = torch.randn(B, T, 3 * D, device="cuda", generator=g).to(dtype)[..., D : 2 * D]
        return x, ((T * 3 * D, 3 * D, 1), D)
    if kind == "pitch-514":  # token pitch 514 elements for D = 512
        x = torch.randn(B, T, 514, device="cuda", generator=g).to(dtype)[..., :D]
        return x, ((T * 514, 514, 1), 0)
    if kind == "offset-1":  # contiguous strides, data 2 bytes past an aligned address
        flat = torch.randn(B * T * D + 1, device="cuda", generator=g).to(dtype)
        return flat[1:].view(B, T, D), ((T * D, D, 1), 1)
    if kind == "transposed":  # stored [B, D, T]
        x = torch.randn(B, D, T, device="cuda", generator=g).to(dtype).transpose(1, 2)
        return x, ((D * T, 1, T), 0)
    raise ValueError(kind)


@pytest.mark.parametrize(
    "kind", ["contiguous", "channel-slice", "pitch-514", "offset-1", "transposed"]
)
@pytest.mark.parametrize("B,T", [(2, 1000), (4, 2048)])
def test_x_layouts(kind, B, T):
    D, W = 512, 4
    x, (strides, offset) = _layout(kind, B, T, D, bf16)
    assert (x.stride(), x.storage_offset()) == (strides, offset), kind
    w = torch.randn(D, W, device="cuda") / 2
    dy = torch.randn(B, T, D, device="cuda").to(bf16)
    check_against_oracle_and_fla(x, w, dy, kind)


def test_dy_slice_of_wider_tensor():
    B, T, D, W = 2, 1000, 512, 4
    x, w, _ = make(B, T, D, W, bf16, f32)
    dy = torch.randn(B, T, 2 * D, device="cuda").to(bf16)[..., :D]
    check_against_oracle_and_fla(x, w, dy, "dy slice")


def test_dy_with_zero_strides():
    """y.sum().backward() hands the backward an expanded scalar: every stride is 0."""
    B, T, D, W = 2, 1000, 512, 4
    x, w, _ = make(B, T, D, W, bf16, f32)
    grads = []
    for fn in (causal_conv1d, fla_ops.causal_conv1d):
        xl, wl = x.detach().requires_grad_(), w.detach().requires_grad_()
        fn(xl, wl, activation="silu")[0].sum().backward()
        grads.append((xl.grad, wl.grad))
    dy = torch.ones(B, T, D, device="cuda", dtype=bf16)
    _, dx_ref, dw_ref = oracle(x, w, dy)
    (dx, dw), (dx_f, dw_f) = grads
    assert rel(dx, dx_ref) <= TOL["dx"] and rel(dx, dx_ref) <= RATIO * rel(dx_f, dx_ref) + SLACK
    assert rel(dw, dw_ref) <= TOL["dw"] and rel(dw, dw_ref) <= RATIO * rel(dw_f, dw_ref) + SLACK


# ----------------------------------------------------------------------------------------
# the fallback: bit-identical to fla, and none of our kernels
# ----------------------------------------------------------------------------------------


def _fallback_cases():
    # D, W and dtypes of the layout tests, so the plain calls share fla's autotuned configs.
    B, T, D, W = 2, 256, 512, 4
    x, w, _ = make(B, T, D, W, bf16, f32)
    return {
        "bias": (x, w, {"bias": torch.randn(D, device="cuda")}),
        "residual": (x, w, {"residual": torch.randn(B, T, D, device="cuda").to(bf16)}),
        "initial_state": (x, w, {"initial_state": torch.randn(B, D, W, device="cuda").to(bf16)}),
        "output_final_state": (x, w, {"output_final_state": True}),
        "no activation": (x, w, {"activation": None}),
        "cu_seqlens": (
            x[:1],
            w,
            {"cu_seqlens": torch.tensor([0, 100, 256], device="cuda", dtype=torch.int32)},
        ),
        "W=5": (x, torch.randn(D, 5, device="cuda"), {}),
        "fp32 x": (x.float(), w, {}),
    }


# the cases a build with a box module (ideas 002 and later) runs on its kernels; W=5 goes to fla in
# every build
BOX_CASES = ("bias", "residual", "initial_state", "output_final_state", "no activation",
             "cu_seqlens", "fp32 x")  # fmt: skip
FALLBACK_CASES = [
    "bias",
    "residual",
    "initial_state",
    "output_final_state",
    "no activation",
    "cu_seqlens",
    "W=5",
    "fp32 x",
]


def _forward_backward(fn, x, w, kwargs):
    """(y, final state, dx, dw) of fn on fresh leaves, or the exception fn raised."""
    xl, wl = x.detach().requires_grad_(), w.detach().requires_grad_()
    try:
        y, state = fn(xl, wl, **kwargs)
        y.float().square().sum().backward()
    except Exception as exc:  # a call fla rejects must be rejected the same way
        return exc
    return y, state, xl.grad, wl.grad


def _assert_same_outcome(ours, theirs, label: str) -> None:
    """Bit-identical results, or the same exception (type and message)."""
    if isinstance(theirs, Exception):
        assert isinstance(ours, Exception), f"{label}: fla raised {theirs!r}, ours returned"
        assert (type(ours), str(ours)) == (type(theirs), str(theirs)), label
        return
    assert not isinstance(ours, Exception), f"{label}: ours raised {ours!r}, fla did not"
    for a, b in zip(ours, theirs, strict=True):
        if a is None or b is None:
            assert a is None and b is None, label
        else:
            assert a.dtype == b.dtype and a.shape == b.shape, label
            assert torch.equal(a, b), label


@pytest.mark.parametrize("name", FALLBACK_CASES)
def test_unsupported_is_bit_identical_to_fla(name, monkeypatch):
    monkeypatch.delenv("KERNEL_FUN_DISABLE", raising=False)
    monkeypatch.delenv("KERNEL_FUN_CCONV_DISABLE", raising=False)
    x, w, extra = _fallback_cases()[name]
    kwargs = {"activation": "silu", **extra}
    ok, reason = is_supported(x, w, **kwargs)
    if name in BOX_CASES and ops._box() is not None:
        assert ok, reason
        pytest.skip("this build's box module takes the case: test_cconv_box_gpu.py checks it "
                    "against fla and the oracle")  # fmt: skip
    assert not ok and reason

    ours = _forward_backward(causal_conv1d, x, w, kwargs)  # first: fla autotunes here
    theirs = _forward_backward(fla_ops.causal_conv1d, x, w, kwargs)
    _assert_same_outcome(ours, theirs, name)
    # The witness, on a warm call: none of our kernels, and fla's (unless fla raises).
    names = kernels_launched(lambda: _forward_backward(causal_conv1d, x, w, kwargs))
    assert not any_exactly(names, OUR_KERNELS), f"our kernels ran on a fallback: {names}"
    if not isinstance(theirs, Exception):
        assert any_named(names, ("causal_conv1d_fwd_kernel",)), f"fla's kernel missing: {names}"


def test_disable_switch_is_bit_identical(monkeypatch):
    x, w, dy = make(2, 512, 512, 4, bf16, f32)
    monkeypatch.setenv("KERNEL_FUN_CCONV_DISABLE", "1")
    ours = run(causal_conv1d, x, w, dy)
    theirs = run(fla_ops.causal_conv1d, x, w, dy)
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))
    names = kernels_launched(lambda: run(causal_conv1d, x, w, dy))
    assert not any_exactly(names, OUR_KERNELS), names
    assert any_named(names, FLA_KERNELS), names


def test_supported_call_runs_ours_not_fla():
    x, w, dy = make(4, 2048, 1024, 4, bf16, f32)
    run(causal_conv1d, x, w, dy)  # compile and autotune outside the profiled call
    names = kernels_launched(lambda: run(causal_conv1d, x, w, dy))
    assert any_exactly(names, OURS["fwd"]), names
    assert any_exactly(names, OURS["bwd"]), names
    assert not any_named(names, FLA_KERNELS), f"fla's conv kernels ran: {names}"


# ----------------------------------------------------------------------------------------
# determinism, CUDA graphs, torch.compile, autotune caching, 64-bit offsets
# ----------------------------------------------------------------------------------------


def test_deterministic_dx_dw():
    x, w, dy = make(16, 4096, 2048, 4, bf16, f32)
    first = run(causal_conv1d, x, w, dy)
    for _ in range(3):
        again = run(causal_conv1d, x, w, dy)
        assert all(torch.equal(a, b) for a, b in zip(first, again))


class _Conv(torch.nn.Module):
    def __init__(self, w):
        super().__init__()
        self.w = torch.nn.Parameter(w.clone())

    def forward(self, x):
        return causal_conv1d(x, self.w, activation="silu")[0]


def test_cuda_graph_capture_replays_bit_identical(monkeypatch):
    B, T, D, W = 4, 2048, 1024, 4
    x, w, dy = make(B, T, D, W, bf16, f32)
    mod = _Conv(w).cuda()

    def eager() -> tuple[torch.Tensor, ...]:
        # Nothing of this graph may outlive the call: torch keeps the parameter's
        # AccumulateGrad node, made here on the default stream, for as long as the graph
        # lives, and capturing a backward through it on the side stream would then make the
        # default stream wait on the capturing one, which CUDA refuses.
        xe = x.detach().requires_grad_()
        y = mod(xe)
        y.backward(dy)
        return y.detach().clone(), xe.grad.clone(), mod.w.grad.clone()

    ref = eager()  # also the eager fwd + bwd that makes the shape capturable
    mod.w.grad = None

    # During capture and replay nothing may reach fla: make the fallback fail loudly.
    def no_fla():
        raise AssertionError("fla fallback taken under capture")

    monkeypatch.setattr(ops.compat, "fla_causal_conv1d", no_fla)
    graphed = torch.cuda.make_graphed_callables(mod, (x.detach().requires_grad_(),))
    for _ in range(2):
        mod.w.grad = None
        xg = x.detach().requires_grad_()
        y = graphed(xg)
        y.backward(dy)
        torch.cuda.synchronize()
        assert torch.equal(y, ref[0])
        assert torch.equal(xg.grad, ref[1])
        assert torch.equal(mod.w.grad, ref[2])


def test_capture_of_a_cold_shape_goes_to_fla():
    x, w, _ = make(1, 333, 320, 3, bf16, f32)  # a shape nothing else here runs
    sig = ops._warm_sig(x, w)
    assert support.capture_unsupported_reason(sig, False) is None  # not capturing now
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.stream(stream):
        # fla's path under capture for a cold shape is fla's business; only the gate is checked
        with torch.cuda.graph(graph, stream=stream):
            options = ops._options(None, None, None, False, None, None, None, None)
            reason = ops._unsupported_reason(x, w, "silu", "triton", options, {})
            x.sum()  # one captured kernel, so the graph is not empty
    assert reason is not None and "capture" in reason


def test_torch_compile_dynamic_two_lengths():
    D, W = 1024, 4
    w = (torch.randn(D, W, device="cuda") / 2).requires_grad_()

    def loss_fn(x, w):
        y, _ = causal_conv1d(x, w, activation="silu")
        return y.float().square().mean()

    compiled = torch.compile(loss_fn, dynamic=True)
    for T in (1000, 1536):
        x = torch.randn(2, T, D, device="cuda").to(bf16).requires_grad_()
        loss = compiled(x, w)
        loss.backward()
        assert torch.isfinite(loss)
        assert torch.isfinite(x.grad).all() and torch.isfinite(w.grad).all()
        x2 = x.detach().requires_grad_()
        w2 = w.detach().requires_grad_()
        eager = loss_fn(x2, w2)
        eager.backward()
        assert torch.allclose(loss, eager, rtol=1e-4)
        # the compiled graph computes dy itself, so grads agree to rounding, not bit for bit
        assert rel(x.grad, x2.grad.double()) < 2e-2
        assert rel(w.grad, w2.grad.double()) < 2e-2
        w.grad = None


def _jit_functions(modules) -> list:
    """Every Triton JIT function defined or imported at module level in `modules`, unwrapped
    from heuristics and autotuners."""
    out = {}
    for m in modules:
        for v in vars(m).values():
            fn = v
            while hasattr(fn, "fn") and not hasattr(fn, "device_caches"):
                fn = fn.fn
            if hasattr(fn, "device_caches"):
                out[id(fn)] = fn
    return list(out.values())


def _compiled_count(fns) -> int:
    """Compiled kernels held by these JIT functions, over every device."""
    return sum(len(cache[0]) for fn in fns for cache in fn.device_caches.values())


def test_warmup_then_new_lengths_compile_and_autotune_nothing():
    # the dense kernels the build runs: the box module's (ideas 002 and later), else idea 001's
    dense = ops._box()
    if dense is None:
        from kernel_fun.cconv._kernels import strip as dense

    # a box module may launch kernels of the modules it imports (011 launches 004's and
    # 006's; 005 launched 004's tuned ones): every kernel in reach is watched
    def ours(m) -> list:
        return [
            v
            for v in vars(m).values()
            if isinstance(v, types.ModuleType) and v.__name__.startswith("kernel_fun.")
        ]

    homes = [dense, *ours(dense)]
    homes += [m for h in list(homes) for m in ours(h) if m not in homes]
    tuners = [
        getattr(m, name)
        for m in homes
        for name in ("cconv_fwd_tuned", "cconv_bwd_tuned")
        if hasattr(m, name)
    ]
    jits = _jit_functions(homes)
    assert len(jits) >= 2, f"no Triton kernels in reach of {dense.__name__}"
    B, D, W = 2, 1024, 4
    calls = warmup(D, W, B=B, T_max=8192)
    assert calls > 0
    tuned = [dict(t.cache) for t in tuners]
    compiled = _compiled_count(jits)
    assert compiled > 0, "warmup compiled nothing"
    rng = random.Random(5)
    w = torch.randn(D, W, device="cuda")
    for _ in range(20):
        T = rng.randint(1, 8192)
        x = torch.randn(B, T, D, device="cuda").to(bf16)
        run(causal_conv1d, x, w, torch.randn_like(x))
    assert [dict(t.cache) for t in tuners] == tuned, "a new length triggered autotuning"
    assert _compiled_count(jits) == compiled, "a new length compiled a kernel after warmup"


@pytest.mark.slow
def test_offsets_past_2_31_elements():
    """Batch 1 starts at element 2^31: every offset must be 64-bit."""
    B, T, D, W = 2, 262144, 8192, 4
    assert T * D == 2**31
    torch.manual_seed(3)
    x = torch.randn(B, T, D, device="cuda", dtype=bf16)
    w = torch.randn(D, W, device="cuda") / 2
    dy = torch.randn(B, T, D, device="cuda", dtype=bf16)
    with torch.no_grad():
        y = ops._CausalConv1dSilu.apply(x, w)
    xl = x.detach().requires_grad_()
    ops._CausalConv1dSilu.apply(xl, w).backward(dy)
    dx = xl.grad
    R = 64
    for lo in (0, T - R):  # batch 1's first rows (offset 2^31) and its last rows
        s0 = max(0, lo - (W - 1))
        s1 = min(T, lo + R + (W - 1))
        xs, dys = x[1:2, s0:s1], dy[1:2, s0:s1].clone()
        dys[:, : lo - s0] = 0  # rows before lo: their context is cut, they must not contribute
        yr, dxr, _ = oracle(xs, w, dys)
        a, b = lo - s0, lo - s0 + R
        assert rel(y[1:2, lo : lo + R], yr[:, a:b]) <= TOL["y"]
        assert rel(dx[1:2, lo : lo + R], dxr[:, a:b]) <= TOL["dx"]
