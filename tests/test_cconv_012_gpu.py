"""cconv idea 012 on the GPU: calls served by a launch plan compute what idea 011 computes,
bit for bit, in every case, dense shapes and layouts included; repeated calls are served by
plans; a planned call is captured by a CUDA graph."""

from __future__ import annotations

import pytest
import torch

import ladder  # noqa: F401  (the idea import finder)

pytestmark = pytest.mark.gpu

LENS = [1, 2, 3, 700, 5, 1200, 4]
CASES = [
    # (name, B, T, D, W, x dtype, bias, residual, state (True: initial and final), packed)
    ("dense", 2, 999, 2048, 4, torch.bfloat16, False, False, False, False),
    ("dense-small-fp16", 1, 4096, 768, 4, torch.float16, False, False, False, False),
    ("bias-residual", 2, 999, 2048, 4, torch.bfloat16, True, True, False, False),
    ("state", 3, 517, 1536, 3, torch.bfloat16, False, False, True, False),
    ("packed-state", 1, sum(LENS), 2048, 4, torch.bfloat16, True, False, True, True),
    ("fp32", 2, 640, 1024, 4, torch.float32, True, False, True, False),
    ("decode-state", 1, 1, 2048, 4, torch.bfloat16, False, False, True, False),
    # a final state (and its gradient) without an initial one: the planned case backward
    ("packed-final", 1, sum(LENS), 2048, 4, torch.bfloat16, True, True, "final", True),
    ("fp32-final", 2, 640, 1024, 4, torch.float32, True, False, "final", False),
]


@pytest.fixture(scope="module")
def kernels():
    if not torch.cuda.is_available():
        pytest.fail("GPU test without a CUDA device (run it on the device machine)")
    from ladder.kernels.cconv.ideas.i011 import kernel as k11
    from ladder.kernels.cconv.ideas.i012 import kernel as k12

    return k11, k12


def _args(name, B, T, D, W, dtype, bias, residual, state, packed, strided=False):
    dev = torch.device("cuda")
    torch.manual_seed(T + D + W)
    if strided:  # a channel slice of a wider activation
        x = torch.randn(B, T, 3 * D, device=dev, dtype=dtype)[:, :, D : 2 * D]
    else:
        x = torch.randn(B, T, D, device=dev, dtype=dtype)
    w = torch.randn(D, W, device=dev) / 2
    cu, N = None, B
    if packed:
        cu = torch.tensor([0, *torch.tensor(LENS).cumsum(0).tolist()], device=dev)
        cu, N = cu.to(torch.int32), len(LENS)
    fwd = dict(
        bias=torch.randn(D, device=dev) if bias else None,
        residual=torch.randn(B, T, D, device=dev, dtype=dtype) if residual else None,
        initial_state=(torch.randn(N, D, W, device=dev, dtype=dtype) if state is True else None),
        activation="silu",
        cu_seqlens=cu,
    )
    dy = torch.randn(B, D, T, device=dev, dtype=dtype).transpose(1, 2)  # time-minor
    dht = torch.randn(N, D, W, device=dev, dtype=dtype) if state else None
    return x, w, dy, dht, fwd, bool(state)


def _call(k, x, w, dy, dht, fwd, out_state):
    y, hT = k.conv_fwd(x, w, output_final_state=out_state, **fwd)
    return (y, hT, *k.conv_bwd(x, w, dy, dht=dht, **fwd))


def _same(a, b) -> bool:
    return all(
        (p is None and q is None) or (p is not None and q is not None and torch.equal(p, q))
        for p, q in zip(a, b, strict=True)
    )


@pytest.mark.parametrize("strided", [False, True], ids=["contiguous", "strided"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_planned_calls_equal_011(kernels, case, strided):
    k11, k12 = kernels
    x, w, dy, dht, fwd, out_state = _args(*case, strided=strided)
    ref = _call(k11, x, w, dy, dht, fwd, out_state)
    before = k12.plans()["hits"]
    outs = [_call(k12, x, w, dy, dht, fwd, out_state) for _ in range(3)]
    hits = k12.plans()["hits"] - before
    for out in outs:
        assert _same(out, ref), case[0]
    # the forward of every case is planned; the backward too without an initial state
    assert hits >= 2 * (1 if case[8] is True else 2), (case[0], hits)
    assert all(torch.isfinite(t).all() for t in ref if t is not None)


def test_new_outputs_every_call(kernels):
    """A plan allocates the call's outputs: two calls never share a y."""
    _, k12 = kernels
    x, w, *_ = _args(*CASES[0])
    y1, y2 = k12.cconv_fwd(x, w), k12.cconv_fwd(x, w)
    assert y1.data_ptr() != y2.data_ptr() and torch.equal(y1, y2)


def test_a_planned_call_is_captured_by_a_cuda_graph(kernels):
    _, k12 = kernels
    x, w, dy, dht, fwd, out_state = _args(*CASES[4])  # packed, with states
    ref = _call(k12, x, w, dy, dht, fwd, out_state)
    _call(k12, x, w, dy, dht, fwd, out_state)  # planned now
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = _call(k12, x, w, dy, dht, fwd, out_state)
    graph.replay()
    torch.cuda.synchronize()
    assert _same(out, ref)
