"""cconv idea 017 on the GPU: 016's GPU tests (tests/test_cconv_016_gpu.py) on 017's module.
Every call, planned or not, computes what idea 013 computes (as tests/test_cconv_015_gpu.py
defines it: bit for bit but for a handful of elements one rounding step apart) with the case
backward's stage count per case (bias and residual at CCONV_CASE_BWD_STAGES, states at
CCONV_STATE_BWD_STAGES, packed at 1; no activation, ragged segments, strided x and time-minor
dy); a planned backward with an initial state (two launches) is captured by a CUDA graph."""

from __future__ import annotations

import pytest
import torch

import ladder  # noqa: F401  (the idea import finder)
from tests.test_cconv_016_gpu import (  # noqa: F401  (collected here, on this module's fixture)
    test_a_large_packed_batch_with_states_equals_013s,
    test_a_planned_backward_with_an_initial_state_is_captured_by_a_cuda_graph,
    test_calls_equal_013s,
)

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def kernels():
    if not torch.cuda.is_available():
        pytest.fail("GPU test without a CUDA device (run it on the device machine)")
    from ladder.kernels.cconv.ideas.i013 import kernel as k13
    from ladder.kernels.cconv.ideas.i017 import kernel as k17

    return k13, k17
