"""cconv idea 011 on the GPU: every case launch through the cache computes what Triton's own
launch computes, bit for bit, and the cache serves the repeated calls; the final state from
the forward's own grid equals 002's separate kernel bit for bit; the table's configurations
compute what idea 010's autotuned launches compute; a cached case call is captured by a CUDA
graph."""

from __future__ import annotations

import pytest
import torch

import ladder  # noqa: F401  (the idea import finder)

pytestmark = pytest.mark.gpu

LENS = [1, 2, 3, 700, 5, 1200, 4]  # packed: sequences shorter than W, and long ones
CASES = [
    # (name, B, T, D, W, x dtype, bias, residual, state, packed)
    ("bias-residual", 2, 999, 2048, 4, torch.bfloat16, True, True, False, False),
    ("state", 3, 517, 1536, 3, torch.bfloat16, False, False, True, False),
    ("state-fp16", 2, 2, 2048, 4, torch.float16, False, False, True, False),
    ("packed-state", 1, sum(LENS), 2048, 4, torch.bfloat16, True, False, True, True),
    ("fp32", 2, 640, 1024, 4, torch.float32, True, False, True, False),
    ("dense-hT", 2, 1000, 2048, 4, torch.bfloat16, False, False, False, False),
    ("large-state", 4, 2048, 2048, 4, torch.bfloat16, False, True, True, False),  # 4^12
]


@pytest.fixture(scope="module")
def k11():
    if not torch.cuda.is_available():
        pytest.fail("GPU test without a CUDA device (run it on the device machine)")
    from ladder.kernels.cconv.ideas.i011 import kernel

    return kernel


def _args(name, B, T, D, W, dtype, bias, residual, state, packed):
    dev = torch.device("cuda")
    torch.manual_seed(T + D + W)
    x = torch.randn(B, T, D, device=dev, dtype=dtype)
    w = torch.randn(D, W, device=dev) / 2
    cu = None
    N = B
    if packed:
        cu = torch.tensor([0, *torch.tensor(LENS).cumsum(0).tolist()], device=dev)
        cu = cu.to(torch.int32)
        N = len(LENS)
    h0 = torch.randn(N, D, W, device=dev, dtype=dtype) if state else None
    fwd = dict(
        bias=torch.randn(D, device=dev) if bias else None,
        residual=torch.randn_like(x) if residual else None,
        initial_state=h0,
        activation="silu",
        cu_seqlens=cu,
    )
    out_state = state or name == "dense-hT"
    dy = torch.randn_like(x)
    dht = torch.randn(N, D, W, device=dev, dtype=dtype) if out_state else None
    return x, w, dy, dht, fwd, out_state


def _call(k11, x, w, dy, dht, fwd, out_state):
    y, hT = k11.conv_fwd(x, w, output_final_state=out_state, **fwd)
    grads = k11.conv_bwd(x, w, dy, dht=dht, **fwd)
    return (y, hT, *grads)


def _same(a, b) -> bool:
    return all(
        (p is None and q is None) or (p is not None and q is not None and torch.equal(p, q))
        for p, q in zip(a, b, strict=True)
    )


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_cached_case_launches_equal_tritons(k11, monkeypatch, case):
    x, w, dy, dht, fwd, out_state = _args(*case)
    monkeypatch.setattr(k11.k10, "LAUNCH_CACHE", False)
    ref = _call(k11, x, w, dy, dht, fwd, out_state)
    monkeypatch.setattr(k11.k10, "LAUNCH_CACHE", True)
    before = sum(h for h, _ in k11.launches().values())
    outs = [_call(k11, x, w, dy, dht, fwd, out_state) for _ in range(3)]
    hits = sum(h for h, _ in k11.launches().values()) - before
    for out in outs:
        assert _same(out, ref), case[0]
    assert hits >= 2 * 2, f"{case[0]}: the repeated calls were not served by the cache"
    assert all(torch.isfinite(t).all() for t in ref if t is not None)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_fused_final_state_equals_the_separate_kernel(k11, monkeypatch, case):
    x, w, _dy, _dht, fwd, out_state = _args(*case)
    if not out_state:
        pytest.skip("no final state asked for")  # every case above but bias-residual asks
    y1, h1 = k11.conv_fwd(x, w, output_final_state=True, **fwd)
    monkeypatch.setattr(k11, "GRID_Y_MAX", 0)  # no room for the extra programs
    y2, h2 = k11.conv_fwd(x, w, output_final_state=True, **fwd)
    assert torch.equal(y1, y2) and torch.equal(h1, h2)


@pytest.mark.parametrize("B, T", [(1, 2048), (4, 2048), (16, 8192), (3, 1000)])
def test_table_computes_what_the_autotuned_launch_computes(k11, B, T):
    from ladder.kernels.cconv.ideas.i010 import kernel as k10

    torch.manual_seed(B * T)
    D = 2048
    x = torch.randn(B, T, D, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(D, 4, device="cuda") / 2
    dy = torch.randn_like(x)
    y11, (dx11, dw11) = k11.cconv_fwd(x, w), k11.cconv_bwd(x, w, dy)
    y10, (dx10, dw10) = k10.cconv_fwd(x, w), k10.cconv_bwd(x, w, dy)
    # per element the same arithmetic whatever the configuration; dw's per-program partials
    # are summed in the same order (the grid's segments do not depend on the configuration)
    assert torch.equal(y11, y10)
    assert torch.equal(dx11, dx10)
    assert torch.equal(dw11, dw10)


def test_a_cached_case_call_is_captured_by_a_cuda_graph(k11):
    x, w, dy, dht, fwd, out_state = _args(*CASES[3])  # packed, with states
    ref = _call(k11, x, w, dy, dht, fwd, out_state)
    _call(k11, x, w, dy, dht, fwd, out_state)  # cached now
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = _call(k11, x, w, dy, dht, fwd, out_state)
    graph.replay()
    torch.cuda.synchronize()
    assert _same(out, ref)
