"""cconv idea 013 on the GPU: every call, planned or not, computes what idea 011 computes bit
for bit, where 011's small-call knobs are set to the sweep points 013 takes for a small dense
call (forward: 528 programs, 2 warps, G 8; backward: 4 warps, G 8); the backward with an
initial state is served by plans; a planned call (two launches with an initial state) is
captured by a CUDA graph."""

from __future__ import annotations

import pytest
import torch

import ladder  # noqa: F401  (the idea import finder)
from tests.test_cconv_012_gpu import CASES, _args, _call, _same
from tests.test_cconv_013 import _as_011

pytestmark = pytest.mark.gpu

SMALL_WORK = 4194304  # CCONV_SMALL_WORK's default: the calls 013's small configurations take


@pytest.fixture(scope="module")
def kernels():
    if not torch.cuda.is_available():
        pytest.fail("GPU test without a CUDA device (run it on the device machine)")
    from ladder.kernels.cconv.ideas.i011 import kernel as k11
    from ladder.kernels.cconv.ideas.i013 import kernel as k13

    return k11, k13


def _reference(k11, monkeypatch, x, w, dy, dht, fwd, out_state):
    """011's outputs for the call, its forward and backward each at 013's sweep point where
    it is a small call of the dense loop (silu, no bias, initial state or packing; the
    forward also without residual or final state, the backward without dht)."""
    B, T, D = x.shape
    dense = fwd["bias"] is None and fwd["initial_state"] is None and fwd["cu_seqlens"] is None
    dense = dense and x.dtype != torch.float32 and B * T * D < SMALL_WORK
    with monkeypatch.context() as m:
        if dense and fwd["residual"] is None and not out_state:
            _as_011(m, 2, 8, 528)
        y, hT = k11.conv_fwd(x, w, output_final_state=out_state, **fwd)
    with monkeypatch.context() as m:
        if dense and dht is None:
            _as_011(m, 4, 8)
        return (y, hT, *k11.conv_bwd(x, w, dy, dht=dht, **fwd))


@pytest.mark.parametrize("strided", [False, True], ids=["contiguous", "strided"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_calls_equal_011_at_the_sweep_points(kernels, monkeypatch, case, strided):
    k11, k13 = kernels
    x, w, dy, dht, fwd, out_state = _args(*case, strided=strided)
    ref = _reference(k11, monkeypatch, x, w, dy, dht, fwd, out_state)
    before = k13.plans()["hits"]
    outs = [_call(k13, x, w, dy, dht, fwd, out_state) for _ in range(3)]
    hits = k13.plans()["hits"] - before
    for out in outs:
        assert _same(out, ref), case[0]
    assert hits >= 4, (case[0], hits)  # both directions planned from the second call on
    assert all(torch.isfinite(t).all() for t in ref if t is not None)


def test_a_planned_backward_with_an_initial_state_is_captured_by_a_cuda_graph(kernels):
    _, k13 = kernels
    x, w, dy, dht, fwd, out_state = _args(*CASES[4])  # packed, with states
    ref = _call(k13, x, w, dy, dht, fwd, out_state)
    _call(k13, x, w, dy, dht, fwd, out_state)  # planned now
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = _call(k13, x, w, dy, dht, fwd, out_state)
    graph.replay()
    torch.cuda.synchronize()
    assert _same(out, ref) and out[-1] is not None
