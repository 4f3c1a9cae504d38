"""cconv idea 018 on the GPU: every call, planned or not, computes what idea 013 computes (as
tests/test_cconv_015_gpu.py defines it: bit for bit but for a handful of elements one
rounding step apart), packed backwards from CCONV_SMALL_WORK elements up on the pipelined
loop with the loop-free sequence step (long sequences), its fallback (many short and empty
sequences) or both, with states, a final state only or none; the other cases as 017's
(bias and residual, states, no activation, ragged segments, strided x and time-minor dy); a
planned backward with an initial state (two launches) is captured by a CUDA graph."""

from __future__ import annotations

import pytest
import torch

import ladder  # noqa: F401  (the idea import finder)
from tests.test_cconv_012_gpu import CASES, _args, _call, _same
from tests.test_cconv_015_gpu import _agree

pytestmark = pytest.mark.gpu

BIG_LENS = [1, 3, 5000, 17, 2048, 1, 999, 8192 - 3]  # one packed batch above CCONV_SMALL_WORK
# many short and empty sequences (programs over them take the fallback loop), then long ones
SHORT_LENS = [0, 1, 2, 0, 0, 3, 5, 8, 1] * 250 + [3000, 0, 1500]
LARGE = [
    # case backward calls above CCONV_SMALL_WORK (4194304 elements): the pipelined case loop
    ("bias-residual-large", 2, 1500, 2048, 4, torch.bfloat16, True, True, False, False),
    ("state-large-fp16-w3", 3, 1111, 2000, 3, torch.float16, False, False, True, False),
    ("final-large-w2", 2, 2048, 1536, 2, torch.bfloat16, False, False, "final", False),
]


@pytest.fixture(scope="module")
def kernels():
    if not torch.cuda.is_available():
        pytest.fail("GPU test without a CUDA device (run it on the device machine)")
    from ladder.kernels.cconv.ideas.i013 import kernel as k13
    from ladder.kernels.cconv.ideas.i018 import kernel as k18

    return k13, k18


@pytest.mark.parametrize("strided", [False, True], ids=["contiguous", "strided"])
@pytest.mark.parametrize("case", LARGE + CASES, ids=[c[0] for c in LARGE + CASES])
def test_calls_equal_013s(kernels, case, strided):
    k13, k18 = kernels
    x, w, dy, dht, fwd, out_state = _args(*case, strided=strided)
    ref = _call(k13, x, w, dy, dht, fwd, out_state)
    before = k18.plans()["hits"]
    outs = [_call(k18, x, w, dy, dht, fwd, out_state) for _ in range(3)]
    assert k18.plans()["hits"] - before >= 2, case[0]  # planned from the second call on
    for out in outs:
        _agree(out, ref, case[0])
    assert all(torch.isfinite(t).all() for t in ref if t is not None)


@pytest.mark.parametrize("state", [True, "final", False], ids=["states", "final", "none"])
@pytest.mark.parametrize("lens", [BIG_LENS, SHORT_LENS], ids=["long", "short"])
def test_a_large_packed_batch_equals_013s(kernels, monkeypatch, lens, state):
    k13, k18 = kernels
    monkeypatch.setattr("tests.test_cconv_012_gpu.LENS", lens)
    case = ("packed-large", 1, sum(lens), 2048, 4, torch.bfloat16, True, False, state, True)
    x, w, dy, dht, fwd, out_state = _args(*case)
    assert x.numel() >= 4194304 and fwd["cu_seqlens"].numel() == len(lens) + 1
    before = k18.launches()["case_bwd"]
    ref = _call(k13, x, w, dy, dht, fwd, out_state)
    _agree(_call(k18, x, w, dy, dht, fwd, out_state), ref, case[0])
    assert k18.launches()["case_bwd"][1] == before[1] + 1  # 018's case loop ran


def test_a_planned_backward_with_an_initial_state_is_captured_by_a_cuda_graph(kernels):
    _, k18 = kernels
    x, w, dy, dht, fwd, out_state = _args(*LARGE[1])
    ref = _call(k18, x, w, dy, dht, fwd, out_state)
    _call(k18, x, w, dy, dht, fwd, out_state)  # planned now
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = _call(k18, x, w, dy, dht, fwd, out_state)
    graph.replay()
    torch.cuda.synchronize()
    assert _same(out, ref) and out[-1] is not None
