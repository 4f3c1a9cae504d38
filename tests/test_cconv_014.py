"""cconv idea 014 on the CPU: 013's calls where every argument has its slot's type, and idea
011's error, in 011's order and with 011's launches (none), where one does not.

The launch recorder of tests/cconv_recorder.py stands in for Triton's last step. Checked:
- the four bad-argument orders of 013's errata (013's NOTES.md) raise exactly 011's error
  (type and message) and launch exactly what 011 launches before raising, with no plan and
  after a good call of the same shapes was planned; the bad arguments of
  tests/test_cconv_013.py do too;
- every good call of tests/test_cconv_012.py's cases (and the dense ones) is handed to 013's
  entry point unchanged, and each odd one to 011's.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from ladder.kernels.cconv.ideas.i011 import kernel as k11
from ladder.kernels.cconv.ideas.i013 import kernel as k13
from ladder.kernels.cconv.ideas.i014 import kernel as k14

import ladder  # noqa: F401  (the idea import finder)
from tests.cconv_recorder import install
from tests.test_cconv_012 import CASE_OPTS, _case_inputs
from tests.test_cconv_013 import BAD, TABLES, _good

D, W = 24, 4


@pytest.fixture
def rec(monkeypatch):
    """The launch log, with 013's plans (the ones 014 serves from) empty before and after."""
    log = install(monkeypatch)
    for table in TABLES:
        table.clear()
    yield log
    for table in TABLES:
        table.clear()


def _dense():
    return dict(
        x=torch.randn(1, 30, D, dtype=torch.bfloat16), w=torch.randn(D, W), bias=None,
        residual=None, initial_state=None, output_final_state=False, activation="silu",
        cu_seqlens=None,
    )  # fmt: skip


def _quantized(*shape):
    return torch.quantize_per_tensor(torch.zeros(shape), 0.1, 0, torch.quint8)


def _bits8(*shape):
    return torch.zeros(shape, dtype=torch.bits8)


def _fp4(*shape):
    return torch.zeros(shape, dtype=torch.float4_e2m1fn_x2)


# 013's errata: (entry point, base call, the odd arguments)
ERRATA = {
    # 013 evaluates `activation in ("silu", "swish")` first: a numpy array's == is ambiguous
    "bwd: activation whose == raises": ("bwd", _dense, dict(activation=np.array(["silu", "x"]))),
    # 013 reads initial_state.numel() where 011 first calls .contiguous()
    "bwd: initial state not a tensor": (
        "bwd",
        _good,
        dict(initial_state=np.zeros((4, D, W), dtype=np.float32)),
    ),
    # 013 evaluates bool(output_final_state) before 011 reaches initial_state.contiguous()
    "fwd: initial state not a tensor, ambiguous flag": (
        "fwd",
        _good,
        dict(initial_state=np.zeros((4, D, W), dtype=np.float32), output_final_state=np.ones(2)),
    ),  # fmt: skip
    # 013 launches the case loop before failing; 011 fails at torch.zeros_like(bias)
    "bwd: bias not a tensor": ("bwd", _good, dict(bias=np.zeros(D, dtype=np.float32))),
}
# found in a review of this idea: w or bias of an element type no float operand has. 013's
# backward skips 011's zeros_like(w / bias) before its launch, launches dh0 before reducing
# the partials and reduces db before dw, so it fails later, or with another error, than 011
ERRATA.update(
    {
        "bwd: quantized bias": ("bwd", _dense, dict(bias=_quantized(D))),
        "bwd: quantized w": ("bwd", _good, dict(w=_quantized(D, W))),
        "bwd: bits8 w with an initial state": ("bwd", _good, dict(w=_bits8(D, W))),
        "bwd: packed 4-bit bias with an initial state": ("bwd", _good, dict(bias=_fp4(D))),
        "bwd: bits8 w and packed 4-bit bias": (
            "bwd", _dense, dict(w=_bits8(D, W), bias=_fp4(D), residual=None)
        ),
    }
)  # fmt: skip
ERRATA.update({f"fwd: {k}": ("fwd", _good, v) for k, v in BAD.items()})
ERRATA.update(
    {f"bwd: {k}": ("bwd", _good, v) for k, v in BAD.items() if "output_final_state" not in v}
)


def _outcome(rec, fn, *args, **kwargs):
    """(exception type, message, the grids launched) of a call that must fail. Grids only: the
    first of two identical calls goes through Triton and fills 011's launch cache, the second
    launches from that cache, the same launch."""
    rec.clear()
    with pytest.raises(Exception) as info:  # noqa: B017 - whatever 011 raises is the reference
        fn(*args, **kwargs)
    launched = [e[1] for e in rec]
    return info.type, str(info.value), launched


def _run(rec, which: str, module, call: dict):
    if which == "fwd":
        return _outcome(rec, module.conv_fwd, **call)
    a = dict(call)
    a.pop("output_final_state")
    x, w = a.pop("x"), a.pop("w")
    dy = torch.zeros(x.shape if isinstance(x, torch.Tensor) else (1, 30, D), dtype=torch.bfloat16)
    return _outcome(rec, module.conv_bwd, x, w, dy, **a)


def _plan(base: dict) -> None:
    """Two good calls of the base call's shapes, both directions: plans exist afterwards."""
    for _ in range(2):
        y, _ = k14.conv_fwd(**base)
        a = {k: v for k, v in base.items() if k not in ("x", "w", "output_final_state")}
        k14.conv_bwd(base["x"], base["w"], torch.randn_like(y), **a)


@pytest.mark.parametrize("planned", [False, True], ids=["fresh", "after-a-plan"])
@pytest.mark.parametrize("name", list(ERRATA), ids=list(ERRATA))
def test_odd_arguments_fail_as_011_fails(rec, name, planned):
    which, base, odd = ERRATA[name]
    if planned:
        _plan(base())
        assert k13.plans()["hits"] >= 2
    call = {**base(), **odd}
    want = _run(rec, which, k11, call)
    got = _run(rec, which, k14, call)
    assert got == want, (name, got, want)


def test_the_errata_are_real_in_013(rec):
    # the reference this idea fixes: 013 itself differs from 011 at each of the four orders
    # of its errata and the five element-type calls (if 013 stops differing, nothing is left
    # to fix)
    for name in list(ERRATA)[:9]:
        which, base, odd = ERRATA[name]
        call = {**base(), **odd}
        assert _run(rec, which, k13, call) != _run(rec, which, k11, call), name


def _spy(monkeypatch, module, name: str) -> list:
    calls: list = []
    monkeypatch.setattr(module, name, lambda *a: calls.append(a) or "sentinel")
    return calls


@pytest.mark.parametrize("case", CASE_OPTS + [("dense", 1, 30, D, W, torch.bfloat16, False,
                         False, False, False, False, "silu")], ids=lambda c: c[0])  # fmt: skip
def test_typed_calls_go_to_013_unchanged(monkeypatch, case):
    a = _case_inputs(*case)
    to13 = _spy(monkeypatch, k13, "conv_fwd")
    to11 = _spy(monkeypatch, k11, "conv_fwd")
    assert k14.conv_fwd(**a) == "sentinel"
    order = ("x", "w", "bias", "residual", "initial_state", "output_final_state", "activation",
             "cu_seqlens")  # fmt: skip
    assert len(to13) == 1 and not to11
    assert all(x is a[k] for x, k in zip(to13[0], order))
    b13 = _spy(monkeypatch, k13, "conv_bwd")
    b11 = _spy(monkeypatch, k11, "conv_bwd")
    dy = torch.randn_like(a["x"])
    dht = torch.randn_like(a["initial_state"]) if a["initial_state"] is not None else None
    args = (a["x"], a["w"], dy, a["bias"], a["residual"], a["initial_state"], dht,
            a["activation"], a["cu_seqlens"])  # fmt: skip
    assert k14.conv_bwd(*args) == "sentinel"
    assert len(b13) == 1 and not b11 and all(x is y for x, y in zip(b13[0], args))


@pytest.mark.parametrize(
    "odd",
    [dict(output_final_state=np.bool_(True)), dict(output_final_state=1.0),
     dict(activation=np.str_("silu")), dict(bias=[0.0] * D), dict(cu_seqlens=(0, 30))],
    ids=["numpy-bool-flag", "float-flag", "numpy-str-activation", "list-bias", "tuple-cu"],
)  # fmt: skip
def test_odd_calls_go_to_011(monkeypatch, odd):
    a = {**_dense(), **odd}
    to13 = _spy(monkeypatch, k13, "conv_fwd")
    to11 = _spy(monkeypatch, k11, "conv_fwd")
    assert k14.conv_fwd(**a) == "sentinel"
    assert len(to11) == 1 and not to13


def test_int_flag_and_none_activation_are_typed(monkeypatch):
    # an int output_final_state and activation=None are 013's (011 and 013 accept both)
    to13 = _spy(monkeypatch, k13, "conv_fwd")
    k14.conv_fwd(**{**_dense(), "output_final_state": 1, "activation": None})
    k14.conv_fwd(**{**_dense(), "output_final_state": True})
    assert len(to13) == 2
