"""Bad warmup arguments fail on every machine, not only on the GPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from kernel_fun import cconv, kda


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        (dict(D=-1), "D must be a positive int, got -1"),
        (dict(D="2048"), "D must be a positive int, got '2048'"),
        (dict(D=2048, W=0), "W must be a positive int, got 0"),
        (dict(D=2048, T_max=0), "T_max must be a positive int, got 0"),
        (dict(D=2048, B=float("nan")), "B must be a positive int, got nan"),
        (dict(D=2048, B=True), "B must be a positive int, got True"),
        (dict(D=2048, dtype="bf16"), "dtype must be a torch.dtype"),
        (dict(D=2048, weight_dtype=None), "weight_dtype must be a torch.dtype"),
        (dict(D=2048, dtype=torch.int32), "dtype must be a floating dtype such as torch.bfloat16"),
        (dict(D=2048, weight_dtype=torch.bool), "weight_dtype must be a floating dtype"),
        (dict(D=2048, device="nonsense"), "device 'nonsense' is not a device"),
        (dict(D=2048, device=True), "device must be a torch.device"),
        (dict(D=2048, device=1.5), "device must be a torch.device"),
        (dict(D=2048, backward="no"), "backward='no' is not a bool"),
    ],
)
def test_cconv_warmup_refuses_bad_arguments(kwargs, needle) -> None:
    with pytest.raises((ValueError, TypeError)) as info:
        cconv.warmup(**kwargs)
    assert needle in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("args", "kwargs", "needle"),
    [
        ((16, 15), {}, "HV=15 is not a multiple of H=16"),
        ((-1,), {}, "H must be a positive int, got -1"),
        ((16, 16, 0), {}, "K must be a positive int, got 0"),
        ((16, 16, 128, 128.0), {}, "V must be a positive int, got 128.0"),
        ((16,), dict(B=()), "B is an empty tuple"),
        ((16,), dict(B=(2, 0)), "B[1] must be a positive int, got 0"),
        ((16,), dict(B=1.5), "B must be a positive int, got 1.5"),
        ((16,), dict(B={1, 2}), "B must be a positive int, got {1, 2}"),
        ((16,), dict(T_max=-8), "T_max must be a positive int, got -8"),
        ((16,), dict(dtype=torch.float64.itemsize), "dtype must be a torch.dtype"),
        ((16,), dict(dtype=torch.int64), "dtype must be a floating dtype"),
        ((16,), dict(device="cuda:x"), "device 'cuda:x' is not a device"),
        ((16,), dict(safe_gate="yes"), "safe_gate='yes' is not a bool"),
        ((16,), dict(varlen=1), "varlen=1 is not a bool"),
        ((16,), dict(safe_gate=True), "needs lower_bound in [-5.0, 0.0)"),
        ((16,), dict(safe_gate=True, lower_bound=5.0), "needs lower_bound in [-5.0, 0.0), got 5.0"),
        ((16,), dict(safe_gate=True, lower_bound=float("nan")), "needs lower_bound"),
        ((16,), dict(lower_bound=-1.0), "lower_bound=-1.0 without safe_gate=True"),
    ],
)
def test_kda_warmup_refuses_bad_arguments(args, kwargs, needle) -> None:
    with pytest.raises((ValueError, TypeError)) as info:
        kda.warmup(*args, **kwargs)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_good_arguments_still_pass_without_a_gpu(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    # numpy integers are sizes too; a valid call does nothing on a CPU-only machine
    assert cconv.warmup(np.int64(2048), 4, B=2, T_max=64) == 0
    assert kda.warmup(16, 32, 128, 128, B=(1, 4), T_max=128, varlen=True) == 0
    assert kda.warmup(16, safe_gate=True, lower_bound=-5.0, state=True) == 0
    # every accepted form of a device
    for device in (None, 0, "cuda", "cuda:1", torch.device("cuda", 0), "cpu"):
        assert cconv.warmup(64, device=device) == 0
        assert kda.warmup(2, device=device) == 0
