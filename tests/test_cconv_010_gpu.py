"""cconv idea 010 on the GPU: a cached launch computes what Triton's own launch computes, bit
for bit, at every signature the cache keys apart (dtype, a misaligned channel slice, a new T
of either class, small and autotuned calls, backward with broadcast dy), and the cache does
serve the repeated calls."""

from __future__ import annotations

import pytest
import torch

import ladder  # noqa: F401  (the idea import finder)

pytestmark = pytest.mark.gpu

CALLS = [
    # (B, T, D, x dtype, layout)
    (1, 4096, 768, torch.bfloat16, "contiguous"),  # the small-call grid
    (4, 2048, 2048, torch.bfloat16, "contiguous"),  # autotuned
    (2, 1000, 2048, torch.float16, "contiguous"),
    (2, 777, 2048, torch.bfloat16, "slice"),  # row pitch 3D, offset D: aligned
    (2, 777, 2040, torch.bfloat16, "slice-odd"),  # offset 1 element: misaligned
    (1, 1, 2048, torch.bfloat16, "contiguous"),
]


def _x(B, T, D, dtype, layout, dev):
    if layout == "contiguous":
        return torch.randn(B, T, D, device=dev, dtype=dtype)
    off = D if layout == "slice" else 1
    wide = torch.randn(B, T, 3 * D + 1, device=dev, dtype=dtype)
    return wide[:, :, off : off + D]


@pytest.fixture(scope="module")
def k10():
    if not torch.cuda.is_available():
        pytest.fail("GPU test without a CUDA device (run it on the device machine)")
    from ladder.kernels.cconv.ideas.i010 import kernel

    return kernel


@pytest.mark.parametrize("B, T, D, dtype, layout", CALLS)
def test_cached_launch_equals_tritons(k10, monkeypatch, B, T, D, dtype, layout):
    dev = torch.device("cuda")
    torch.manual_seed(T + D)
    x = _x(B, T, D, dtype, layout, dev)
    w = torch.randn(D, 4, device=dev)
    dy = torch.randn(B, T, D, device=dev, dtype=dtype)
    monkeypatch.setattr(k10, "LAUNCH_CACHE", False)
    y_ref = k10.cconv_fwd(x, w)
    dx_ref, dw_ref = k10.cconv_bwd(x, w, dy)
    monkeypatch.setattr(k10, "LAUNCH_CACHE", True)
    before = k10.launches()
    outs = [(k10.cconv_fwd(x, w), *k10.cconv_bwd(x, w, dy)) for _ in range(3)]
    after = k10.launches()
    for y, dx, dw in outs:
        assert torch.equal(y, y_ref)
        assert torch.equal(dx, dx_ref)
        assert torch.equal(dw, dw_ref)
    hits = sum(after[k][0] - before[k][0] for k in after)
    assert hits >= 4, (before, after)  # the 2nd and 3rd fwd and bwd at least


def test_broadcast_dy_and_a_new_T_hit_and_match(k10, monkeypatch):
    dev = torch.device("cuda")
    D = 1024
    w = torch.randn(D, 3, device=dev, dtype=torch.bfloat16)
    for T in (512, 513, 528, 4096):
        x = torch.randn(2, T, D, device=dev, dtype=torch.bfloat16)
        dy = torch.randn(1, 1, D, device=dev, dtype=torch.bfloat16).expand(2, T, D)
        monkeypatch.setattr(k10, "LAUNCH_CACHE", False)
        ref = (k10.cconv_fwd(x, w), *k10.cconv_bwd(x, w, dy))
        monkeypatch.setattr(k10, "LAUNCH_CACHE", True)
        for _ in range(2):
            got = (k10.cconv_fwd(x, w), *k10.cconv_bwd(x, w, dy))
            for a, b in zip(got, ref, strict=True):
                assert torch.equal(a, b), T


def test_a_cached_launch_is_captured_by_a_cuda_graph(k10):
    """The cached launch goes to the current stream: under graph capture (a side stream) a
    launch to any other stream would fail the capture, and the replay recomputes y."""
    dev = torch.device("cuda")
    x = torch.randn(4, 2048, 2048, device=dev, dtype=torch.bfloat16)
    w = torch.randn(2048, 4, device=dev)
    ref = k10.cconv_fwd(x, w)
    k10.cconv_fwd(x, w)  # cached from here
    hits = sum(h for h, _ in k10.launches().values())
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = k10.cconv_fwd(x, w)
    assert sum(h for h, _ in k10.launches().values()) == hits + 1
    x.copy_(torch.randn_like(x))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, k10.cconv_fwd(x, w))
    assert not torch.equal(y, ref)
