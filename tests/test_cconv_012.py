"""cconv idea 012's launch plans on the CPU.

A plan's hit path calls a compiled kernel's launcher, so these tests stand Triton's last step
in with a recorder (tests/cconv_recorder.py, as tests/test_cconv_010.py does): the kernels' JIT functions return a fake
compiled kernel whose launcher records its arguments, and the current device and stream are
stubbed. Checked: a call served by a plan launches exactly what 011's host code hands Triton
for the same call (grid, every argument in order, every constexpr and config value), with the
call's own tensors; every change of what the plan's signature holds takes 011's path again;
launch hooks, CCONV_LAUNCH_CACHE=0 and the table's bound keep calls off the plans; bad input
raises 011's errors. The kernels' arithmetic is 011's (`ladder check cconv 012 --interpret`
and the GPU tests, which compare planned calls with 011's bit for bit).
"""

from __future__ import annotations

import pytest
import torch
from ladder.kernels.cconv.ideas.i011 import kernel as k11
from ladder.kernels.cconv.ideas.i012 import kernel as k12
from triton import knobs

import ladder  # noqa: F401  (the idea import finder)
from tests.cconv_recorder import _expect, _same_args, install


@pytest.fixture
def rec(monkeypatch):
    """The launch log (tests/cconv_recorder.py). Plans start empty."""
    log = install(monkeypatch)
    for table in (k12._FWD, k12._BWD, k12._CASE_FWD, k12._CASE_BWD):
        table.clear()
    yield log
    for table in (k12._FWD, k12._BWD, k12._CASE_FWD, k12._CASE_BWD):
        table.clear()


@pytest.mark.parametrize("x_dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("BTD", [(2, 40, 24), (16, 8192, 2048), (1, 4096, 768)])
@pytest.mark.parametrize("strided", [False, True])
def test_dense_fwd_plan_launches_what_011_launches(rec, x_dtype, BTD, strided):
    B, T, D = BTD

    def fresh():
        base = torch.zeros(B, T, 3 * D if strided else D, dtype=x_dtype)
        x = base[:, :, D : 2 * D] if strided else base
        w = torch.randn(4, D).t() if strided else torch.randn(D, 4)  # strided: a copy planned
        return k12.cconv_fwd(x, w), (x, w)

    # the plan passes the call's own x, its w (contiguous copy when strided), and its y
    fresh()
    assert [e[0] for e in rec] == ["triton"]
    y, (x, w) = fresh()
    _, grid, _, args = [e for e in rec if e[0] == "plan"][-1]
    assert args[0] is x and args[2] is y
    assert (args[1] is w) != strided and torch.equal(args[1], w.contiguous())
    rec.clear()
    k12._FWD.clear()
    k11.k10.LAUNCH_CACHE = False
    try:
        k11.cconv_fwd(x, w)
    finally:
        k11.k10.LAUNCH_CACHE = True
    (t,) = rec
    assert grid == t[1]
    want = _expect(t, k11._DENSE_FWD_L.kernel, (args[0], args[1], args[2]))
    assert _same_args(args, want)


@pytest.mark.parametrize("BTD", [(2, 40, 24), (4, 2048, 2048)])
def test_dense_bwd_plan_launches_what_011_launches(rec, BTD):
    B, T, D = BTD
    x = torch.randn(B, T, D, dtype=torch.bfloat16)
    w = torch.randn(D, 3)
    dy0 = torch.randn(B, D, T, dtype=torch.bfloat16).transpose(1, 2)  # time-minor dy
    k12.cconv_bwd(x, w, dy0)
    dy = torch.randn(B, D, T, dtype=torch.bfloat16).transpose(1, 2)
    dx, dw = k12.cconv_bwd(x, w, dy)
    _, grid, _, args = [e for e in rec if e[0] == "plan"][-1]
    assert args[0] is x and args[1] is w and args[2] is dy and args[3] is dx
    assert dw.dtype == w.dtype and dw.shape == w.shape
    dwp = args[4]
    rec.clear()
    k12._BWD.clear()
    k11.k10.LAUNCH_CACHE = False
    try:
        k11.cconv_bwd(x, w, dy)
    finally:
        k11.k10.LAUNCH_CACHE = True
    (t,) = rec
    assert grid == t[1] and t[2][4].shape == dwp.shape and t[2][4].dtype == dwp.dtype
    assert _same_args(args, _expect(t, k11._DENSE_BWD_L.kernel, args[:5]))


CASE_OPTS = [
    # (name, B, T, D, W, x dtype, bias, residual, state, final state, packed, activation)
    ("bias-residual", 2, 99, 48, 4, torch.bfloat16, True, True, False, False, False, "silu"),
    ("state", 3, 17, 40, 3, torch.float16, False, False, True, True, False, "silu"),
    ("packed", 1, 30, 24, 4, torch.bfloat16, True, False, True, True, True, "swish"),
    ("fp32-noact", 2, 64, 32, 2, torch.float32, True, True, False, False, False, None),
    ("dense-final-state", 2, 50, 24, 4, torch.bfloat16, False, False, False, True, False, "silu"),
    ("residual-only", 2, 50, 24, 4, torch.bfloat16, False, True, False, False, False, "silu"),
]


def _case_inputs(name, B, T, D, W, dtype, bias, residual, state, final, packed, act):
    x = torch.randn(B, T, D, dtype=dtype)
    cu = torch.tensor([0, 1, 3, 10, T], dtype=torch.int32) if packed else None
    N = 4 if packed else B
    return dict(
        x=x, w=torch.randn(D, W),
        bias=torch.randn(D) if bias else None,
        residual=torch.randn_like(x) if residual else None,
        initial_state=torch.randn(N, D, W, dtype=dtype) if state else None,
        output_final_state=final, activation=act, cu_seqlens=cu,
    )  # fmt: skip


@pytest.mark.parametrize("case", CASE_OPTS, ids=[c[0] for c in CASE_OPTS])
def test_case_fwd_plan_launches_what_011_launches(rec, case):
    k12.conv_fwd(**_case_inputs(*case))
    a = _case_inputs(*case)
    y, hT = k12.conv_fwd(**a)
    _, grid, _, args = [e for e in rec if e[0] == "plan"][-1]
    assert args[0] is a["x"] and args[6] is y
    assert (hT is None) == (not a["output_final_state"])
    if hT is not None:
        assert args[7] is hT and hT.shape == (args[10], a["x"].shape[2], a["w"].shape[1])
    rec.clear()
    k12._CASE_FWD.clear()
    k11.k10.LAUNCH_CACHE = False
    try:
        y11, hT11 = k11.conv_fwd(**a)
    finally:
        k11.k10.LAUNCH_CACHE = True
    (t,) = [e for e in rec if e[0] == "triton"]
    assert grid == t[1]
    # 011's launch with this call's outputs in place of its own
    t_args = list(t[2])
    assert t_args[6] is y11 and (hT11 is None or t_args[7] is hT11)
    t_args[6] = y
    if hT is not None:
        t_args[7] = hT
    for i in (1, 4):  # w and initial_state: 011 passes .contiguous() of them, the same tensors
        assert t_args[i] is args[i] or torch.equal(t_args[i], args[i])
        t_args[i] = args[i]
    want = _expect(("triton", t[1], tuple(t_args), t[3]), k11._CASE_FWD_L.kernel, ())
    assert _same_args(args, want)


@pytest.mark.parametrize("case", CASE_OPTS, ids=[c[0] for c in CASE_OPTS])
def test_case_bwd_plan_launches_what_011_launches(rec, case):
    """Without an initial state the case backward is planned; with one it is 011's."""

    def inputs():
        a = _case_inputs(*case)
        a.pop("output_final_state")
        if case[9]:  # with a final state: its gradient too
            x = a["x"]
            n = a["cu_seqlens"].numel() - 1 if a["cu_seqlens"] is not None else x.shape[0]
            a["dht"] = torch.randn(n, x.shape[2], a["w"].shape[1], dtype=x.dtype)
        return a, torch.randn_like(a["x"])

    a0, dy0 = inputs()
    k12.conv_bwd(a0.pop("x"), a0.pop("w"), dy0, **a0)
    a, dy = inputs()
    x, w = a.pop("x"), a.pop("w")
    hits = k12.plans()["hits"]
    dx, dw, db, dr, dh0 = k12.conv_bwd(x, w, dy, **a)
    dense = case[5] != torch.float32 and not case[6] and a["cu_seqlens"] is None
    dense = dense and a["initial_state"] is None and a.get("dht") is None and case[11]
    if a["initial_state"] is not None:
        assert k12.plans()["hits"] == hits and not k12._CASE_BWD
        return
    assert k12.plans()["hits"] == hits + 1
    if dense:  # the planned dense backward (its own test checks the launch)
        assert len(k12._BWD) == 1 and not k12._CASE_BWD and dr is dy
        return
    _, grid, _, args = [e for e in rec if e[0] == "plan"][-1]
    assert args[0] is x and args[5] is dy and args[7] is dx
    assert (dr is dy) == (a["residual"] is not None) and dh0 is None
    assert dw.shape == w.shape and dw.dtype == w.dtype
    assert (db is None) == (a["bias"] is None)
    rec.clear()
    for table in (k12._BWD, k12._CASE_BWD):
        table.clear()
    k11.k10.LAUNCH_CACHE = False
    try:
        out11 = k11.conv_bwd(x, w, dy, **a)
    finally:
        k11.k10.LAUNCH_CACHE = True
    (t,) = [e for e in rec if e[0] == "triton"]
    assert grid == t[1]
    t_args = list(t[2])
    assert t_args[7] is out11[0]
    for i in (7, 8, 9):  # dx and the partials: this call's own buffers
        assert t_args[i].shape == args[i].shape and t_args[i].dtype == args[i].dtype
        t_args[i] = args[i]
    for i in (1, 2, 3, 4, 6):  # w, bias, h0 and cu slots, dht: 011's contiguous copies
        assert t_args[i] is args[i] or torch.equal(t_args[i], args[i])
        t_args[i] = args[i]
    want = _expect(("triton", t[1], tuple(t_args), t[3]), t_kernel(t), ())
    assert _same_args(args, want)


def t_kernel(entry):
    """The kernel (case loop or fp32 loop) whose JIT function made a Triton-path entry."""
    fp32 = entry[2][0].dtype == torch.float32
    return (k11._CASE_BWD32_L if fp32 else k11._CASE_BWD_L).kernel


def test_dense_case_fwd_and_bwd_go_to_the_planned_dense_entry_points(rec):
    x = torch.randn(2, 40, 24, dtype=torch.bfloat16)
    w = torch.randn(24, 4)
    for _ in range(2):
        k12.conv_fwd(x, w)
        k12.conv_bwd(x, w, torch.randn_like(x))
    assert len(k12._FWD) == 1 and len(k12._BWD) == 1 and not k12._CASE_FWD
    assert not k12._CASE_BWD


def _x(B=2, T=40, D=24, dtype=torch.bfloat16):
    return torch.randn(B, T, D, dtype=dtype)


@pytest.mark.parametrize(
    "change",
    ["dtype", "misaligned", "T", "strides", "w_dtype", "w_strides", "W", "device"],
)
def test_a_change_of_what_the_signature_holds_misses(rec, monkeypatch, change):
    x, w = _x(), torch.randn(24, 4)
    k12.cconv_fwd(x, w)
    k12.cconv_fwd(x, w)
    assert [e[0] for e in rec] == ["triton", "plan"]
    if change == "dtype":
        x = x.half()
    elif change == "misaligned":
        x = torch.zeros(2 * 40 * 24 + 1, dtype=torch.bfloat16)[1:].view(2, 40, 24)
        assert x.data_ptr() % 16 != 0
    elif change == "T":
        x = _x(T=41)
    elif change == "strides":
        x = torch.zeros(2, 40, 48, dtype=torch.bfloat16)[:, :, :24]
    elif change == "w_dtype":
        w = w.bfloat16()
    elif change == "w_strides":
        w = torch.randn(4, 24).t()
    elif change == "W":
        w = torch.randn(24, 3)
    elif change == "device":
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    k12.cconv_fwd(x, w)
    assert rec[-1][0] == "triton", change


def test_hooks_cache_switch_and_bound_keep_calls_off_the_plans(rec, monkeypatch):
    x, w = _x(), torch.randn(24, 4)
    k12.cconv_fwd(x, w)
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", lambda *a: None)
    k12.cconv_fwd(x, w)
    assert rec[-1][0] == "triton"
    monkeypatch.setattr(knobs.runtime, "launch_enter_hook", None)
    k12.cconv_fwd(x, w)
    assert rec[-1][0] == "plan"
    monkeypatch.setattr(k11.k10, "LAUNCH_CACHE", False)
    k12.cconv_fwd(x, w)
    assert rec[-1][0] == "triton"
    monkeypatch.setattr(k11.k10, "LAUNCH_CACHE", True)
    monkeypatch.setattr(k12, "MAX_PLANS", 1)
    x2 = _x(T=41)
    k12.cconv_fwd(x2, w)
    hits = k12.plans()["hits"]
    k12.cconv_fwd(x2, w)  # served by 011's launch cache, not by a plan
    assert k12.plans()["hits"] == hits and len(k12._FWD) == 1


def test_no_cuda_device_takes_011s_path(rec, monkeypatch):
    def no_device():
        raise RuntimeError("no CUDA")

    monkeypatch.setattr(torch.cuda, "current_device", no_device)
    x, w = _x(), torch.randn(24, 4)
    k12.cconv_fwd(x, w)
    k12.cconv_fwd(x, w)
    assert [e[0] for e in rec] == ["triton", "triton"] and not k12._FWD


@pytest.mark.parametrize(
    "bad, match",
    [
        (dict(x=torch.randn(2, 40, dtype=torch.bfloat16)), "must be \\[B, T, D\\]"),
        (dict(w=torch.randn(23, 4)), "weight must be"),
        (dict(w=torch.randn(24, 5)), "weight"),
        (dict(x=torch.randn(2, 40, 24, dtype=torch.float64)), "x must be"),
    ],
)
def test_bad_input_raises_011s_error_after_a_planned_call(rec, bad, match):
    x, w = _x(), torch.randn(24, 4)
    k12.cconv_fwd(x, w)
    k12.cconv_fwd(x, w)
    args = {"x": x, "w": w, **bad}
    with pytest.raises(ValueError, match=match):
        k11.cconv_fwd(args["x"], args["w"])
    with pytest.raises(ValueError, match=match):
        k12.cconv_fwd(args["x"], args["w"])
    with pytest.raises(ValueError, match=match):
        k12.conv_fwd(args["x"], args["w"], residual=torch.zeros(1))


def test_dy_shape_mismatch_raises_after_a_planned_backward(rec):
    x, w = _x(), torch.randn(24, 4)
    for _ in range(2):
        k12.cconv_bwd(x, w, torch.randn_like(x))
    with pytest.raises(ValueError, match="dy shape"):
        k12.cconv_bwd(x, w, _x(T=41))
    with pytest.raises(ValueError, match="dy shape"):
        k12.conv_bwd(x, w, _x(T=41))
