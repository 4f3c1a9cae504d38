"""The dense fast path of `kernel_fun.cconv.causal_conv1d` against the full gate, on the CPU.

`_dense_fast` may accept a call only if the full gate (`_unsupported_reason` and
`_needs_box`) would send it to the dense kernels too. The device checks (a CUDA tensor, a
tested architecture, capture) are stubbed as passing, so that every other argument is what
decides; a grid of ordinary and odd arguments is compared.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from kernel_fun._common import compat, support
from kernel_fun.cconv import ops


@pytest.fixture
def on_a_gpu(monkeypatch):
    """The device gates answer as on a tested GPU with no capture running."""
    monkeypatch.setattr(support, "triton_unsupported_reason", lambda t, family: None)
    monkeypatch.setattr(support, "capturing", lambda: False)
    monkeypatch.setattr(support, "capture_unsupported_reason", lambda sig, g: None)
    monkeypatch.setattr(compat, "engage", lambda family: True)


def _x(dtype=torch.bfloat16, shape=(2, 16, 8)):
    return torch.zeros(shape, dtype=dtype)


CASES = {
    "dense": {},
    "swish": {"activation": "swish"},
    "fp16": {"x": _x(torch.float16)},
    "fp32 x": {"x": _x(torch.float32)},
    "no activation": {"activation": None},
    "relu": {"activation": "relu"},
    "bias": {"bias": torch.zeros(8)},
    "residual": {"residual": _x()},
    "state": {"initial_state": torch.zeros(2, 8, 4)},
    "final state": {"output_final_state": True},
    "final state None": {"output_final_state": None},
    "final state 1": {"output_final_state": 1},
    "cu_seqlens": {"x": _x(shape=(1, 16, 8)), "cu_seqlens": torch.tensor([0, 5, 16])},
    "cu_seqlens_cpu": {"cu_seqlens_cpu": torch.tensor([0, 16])},
    "chunk_indices": {"chunk_indices": torch.tensor([0])},
    "cp_context": {"cp_context": object()},
    "backend cuda": {"backend": "cuda"},
    "backend None": {"backend": None},
    "W 5": {"weight": torch.zeros(8, 5)},
    "W 0": {"weight": torch.zeros(8, 0)},
    "weight D": {"weight": torch.zeros(9, 4)},
    "weight int": {"weight": torch.zeros(8, 4, dtype=torch.int32)},
    "weight bf16": {"weight": torch.zeros(8, 4, dtype=torch.bfloat16)},
    "x 2-D": {"x": torch.zeros(16, 8, dtype=torch.bfloat16)},
    "x empty": {"x": _x(shape=(2, 0, 8))},
    "x a list": {"x": [[0.0]]},
    "weight None": {"weight": None},
    "B 65536": {"x": torch.zeros(65536, 1, 8, dtype=torch.bfloat16).expand(65536, 1, 8)},
    "extra keyword": {"unknown": 1},
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_fast_path_accepts_only_what_the_full_gate_sends_to_the_dense_kernels(on_a_gpu, name):
    args = {"x": _x(), "weight": torch.zeros(8, 4), "activation": "silu", "backend": "triton",
            **CASES[name]}  # fmt: skip
    x, weight = args.pop("x"), args.pop("weight")
    activation, backend = args.pop("activation"), args.pop("backend")
    names = ("bias", "residual", "initial_state", "output_final_state", "cu_seqlens",
             "cu_seqlens_cpu", "chunk_indices", "cp_context")  # fmt: skip
    opts = tuple(args.pop(n, False if n == "output_final_state" else None) for n in names)
    kwargs = args  # what is left is an unknown keyword
    fast = not kwargs and ops._dense_fast(x, weight, activation, backend, opts)
    options = ops._options(*opts)
    full = ops._unsupported_reason(x, weight, activation, backend, options, kwargs)
    dense = full is None and ops._needs_box(x, activation, options) is None
    assert fast == dense, (name, full)
    if name in ("dense", "swish", "fp16", "final state None", "weight bf16"):
        assert fast  # the fast path does take the ordinary dense calls


def test_the_switches_are_read_on_the_fast_path_too(monkeypatch):
    monkeypatch.setattr(support, "capturing", lambda: False)
    monkeypatch.setattr(compat, "engage", lambda family: True)
    x, w = _x(), torch.zeros(8, 4)
    opts = (None, None, None, False, None, None, None, None)
    # on this CPU the real device gate refuses (x is not a CUDA tensor)
    assert not ops._dense_fast(x, w, "silu", "triton", opts)
    monkeypatch.setattr(support, "triton_unsupported_reason", lambda t, family: None)
    assert ops._dense_fast(x, w, "silu", "triton", opts)
    for switch in ("KERNEL_FUN_DISABLE", "KERNEL_FUN_CCONV_DISABLE"):
        monkeypatch.setenv(switch, "1")
        monkeypatch.setattr(
            support,
            "triton_unsupported_reason",
            lambda t, family: "off" if support.disabled(family) else None,
        )
        assert not ops._dense_fast(x, w, "silu", "triton", opts)
        monkeypatch.delenv(switch)


def test_every_combination_of_optional_arguments_leaves_the_fast_path(on_a_gpu):
    x, w = _x(), torch.zeros(8, 4)
    present = [torch.zeros(8), _x(), torch.zeros(2, 8, 4), True, torch.tensor([0, 16]),
               torch.tensor([0, 16]), torch.tensor([0]), object()]  # fmt: skip
    absent = [None, None, None, False, None, None, None, None]
    for mask in itertools.product((0, 1), repeat=8):
        if not any(mask):
            continue
        opts = tuple(p if m else a for m, p, a in zip(mask, present, absent, strict=True))
        assert not ops._dense_fast(x, w, "silu", "triton", opts), mask


def test_forward_mode_ad_and_torch_func_take_the_full_path(on_a_gpu):
    """A forward-AD dual x has requires_grad False; on the fast path its tangent would be
    dropped silently. Dual levels and torch.func's wrapped tensors go to the full gate, whose
    autograd function raises for them as fla's does."""
    import torch.autograd.forward_ad as fwad

    x, w = _x(torch.float16), torch.zeros(8, 4)
    opts = (None, None, None, False, None, None, None, None)
    assert ops._dense_fast(x, w, "silu", "triton", opts)
    with fwad.dual_level():
        dual = fwad.make_dual(x, torch.ones_like(x))
        assert not ops._dense_fast(dual, w, "silu", "triton", opts)
        assert not ops._dense_fast(x, w, "silu", "triton", opts)  # any open level

    seen = []

    def probe(xb):
        seen.append(ops._dense_fast(xb, w, "silu", "triton", opts))
        return xb.sum()

    torch.func.vmap(probe)(x.unsqueeze(0).expand(2, 2, 16, 8))
    assert seen == [False]


class _Strict(torch.Tensor):
    """A tensor subclass whose dim() raises: the gate must not raise on it."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.Tensor.dim:
            raise RuntimeError("dim() not allowed")
        return super().__torch_function__(func, types, args, kwargs or {})


def test_an_argument_that_raises_on_reading_leaves_the_fast_path(on_a_gpu):
    x = _x().as_subclass(_Strict)
    opts = (None, None, None, False, None, None, None, None)
    assert not ops._dense_fast(x, torch.zeros(8, 4), "silu", "triton", opts)
    reason = ops._unsupported_reason(
        x, torch.zeros(8, 4), "silu", "triton", ops._options(*opts), {}
    )
    assert reason is not None and "cannot classify" in reason
