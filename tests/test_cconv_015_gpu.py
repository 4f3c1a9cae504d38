"""cconv idea 015 on the GPU: every call, planned or not, computes what idea 013 computes,
dense calls from CCONV_SMALL_WORK elements up on the pipelined loops (ragged last segments, D
not a multiple of the strip, fp16, W 1 to 4, strided x and time-minor dy) and every other case
through 014; a planned dense call is captured by a CUDA graph.

"What 013 computes" is bit for bit, but for a handful of elements one rounding step apart:
the pipelined loop is another compile of the same arithmetic, and at W 2 with whole segments
(H100, 2026-12-06) it fused one multiply-add differently, so 4 of 6.3M dx elements came
out one bf16 step from 013's (dw equal, the fp64 oracle's error equal to 1e-9 relative)."""

from __future__ import annotations

import pytest
import torch

import ladder  # noqa: F401  (the idea import finder)
from tests.test_cconv_012_gpu import CASES, _args, _call, _same

pytestmark = pytest.mark.gpu

LARGE = [
    # dense calls above CCONV_SMALL_WORK (4194304 elements): the pipelined loops
    ("dense-large", 2, 1500, 2048, 4, torch.bfloat16, False, False, False, False),
    ("dense-large-fp16-w3", 3, 1111, 2000, 3, torch.float16, False, False, False, False),
    ("dense-large-w1", 1, 8193, 1024, 1, torch.bfloat16, False, False, False, False),
    ("dense-large-w2-res", 2, 2048, 1536, 2, torch.bfloat16, False, True, False, False),
]


def _agree(out: tuple, ref: tuple, name: str) -> None:
    """Each output equal to 013's, or (module docstring) at most one element in 100,000 one
    rounding step of its dtype away from 013's and the rest equal."""
    for i, (p, q) in enumerate(zip(out, ref, strict=True)):
        assert (p is None) == (q is None), (name, i)
        if p is None or torch.equal(p, q):
            continue
        diff = (p.float() - q.float()).abs()
        moved = diff != 0
        assert moved.float().mean().item() <= 1e-5, (name, i, int(moved.sum()))
        step = torch.finfo(p.dtype).eps * torch.maximum(p.float().abs(), q.float().abs())
        assert bool((diff[moved] <= step[moved]).all()), (name, i, diff.max().item())


@pytest.fixture(scope="module")
def kernels():
    if not torch.cuda.is_available():
        pytest.fail("GPU test without a CUDA device (run it on the device machine)")
    from ladder.kernels.cconv.ideas.i013 import kernel as k13
    from ladder.kernels.cconv.ideas.i015 import kernel as k15

    return k13, k15


@pytest.mark.parametrize("strided", [False, True], ids=["contiguous", "strided"])
@pytest.mark.parametrize("case", LARGE + CASES, ids=[c[0] for c in LARGE + CASES])
def test_calls_equal_013s(kernels, case, strided):
    k13, k15 = kernels
    x, w, dy, dht, fwd, out_state = _args(*case, strided=strided)
    ref = _call(k13, x, w, dy, dht, fwd, out_state)
    before = k15.plans()["hits"]
    outs = [_call(k15, x, w, dy, dht, fwd, out_state) for _ in range(3)]
    assert k15.plans()["hits"] - before >= 2, case[0]  # planned from the second call on
    for out in outs:
        _agree(out, ref, case[0])
    assert all(torch.isfinite(t).all() for t in ref if t is not None)


def test_the_large_dense_calls_take_the_pipelined_loops(kernels):
    k13, k15 = kernels
    x, w, dy, *_ = _args(*LARGE[0])
    k15._FWD.clear()
    k15._BWD.clear()
    before13 = (len(k13._FWD), len(k13._BWD))
    before = k15.launches()
    k15.cconv_fwd(x, w)
    k15.cconv_bwd(x, w, dy)
    after = k15.launches()
    assert (len(k13._FWD), len(k13._BWD)) == before13  # nothing of 013's dense path ran
    assert after["dense_fwd"][1] == before["dense_fwd"][1] + 1
    assert after["dense_bwd"][1] == before["dense_bwd"][1] + 1
    # the plans' last parameter is NSTG: the knobs' stage counts
    assert [p.tail[-1] for p in k15._FWD.values()] == [k15.FWD_STAGES]
    assert [p.tail[-1] for p in k15._BWD.values()] == [k15.BWD_STAGES]


def test_a_planned_dense_call_is_captured_by_a_cuda_graph(kernels):
    _, k15 = kernels
    x, w, dy, dht, fwd, out_state = _args(*LARGE[0])
    ref = _call(k15, x, w, dy, dht, fwd, out_state)
    _call(k15, x, w, dy, dht, fwd, out_state)  # planned now
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = _call(k15, x, w, dy, dht, fwd, out_state)
    graph.replay()
    torch.cuda.synchronize()
    assert _same(out, ref)
