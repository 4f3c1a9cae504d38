"""cconv idea 013's launches on the CPU, against idea 011's host code as the reference.

Triton's last step is stood in by the launch recorder of tests/cconv_recorder.py: the
kernels' JIT functions log what they are handed and return a fake compiled kernel whose
launcher logs what a plan passes. Checked:
- a small dense forward launches what 011 launches with the forward's sweep point
  (CCONV_MIN_PROGRAMS=528, CCONV_FIXED_WARPS=2, CCONV_FIXED_G=8), a small dense backward
  what 011 launches at 4 warps and G 8, and a large call what 011 launches unchanged,
  through Triton and through the plan;
- the case backward with an initial state is planned: a repeated call passes 011's two
  launches (case loop, then the initial-state gradient) with the call's own tensors;
- an argument the plan's signature cannot hold raises exactly 011's error (type and message),
  before and after a good call of the same shapes was planned.
The arithmetic is 011's (`ladder check cconv 013 --interpret`, tests/test_cconv_013_gpu.py).
"""

from __future__ import annotations

import pytest
import torch
from ladder.kernels.cconv.ideas.i011 import kernel as k11
from ladder.kernels.cconv.ideas.i013 import kernel as k13

import ladder  # noqa: F401  (the idea import finder)
from tests.cconv_recorder import _expect, _same_args, install
from tests.test_cconv_012 import CASE_OPTS, _case_inputs

TABLES = (k13._FWD, k13._BWD, k13._CASE_FWD, k13._CASE_BWD, k13._CASE_BWD_H0, k13._DH0)


@pytest.fixture
def rec(monkeypatch):
    """The launch log (tests/cconv_recorder.py), with 013's plans empty before and after."""
    log = install(monkeypatch)
    for table in TABLES:
        table.clear()
    yield log
    for table in TABLES:
        table.clear()


def _as_011(monkeypatch, warps: int, g: int, programs: int | None = None) -> None:
    """011's small-call knobs set to a point of the sweep, as its modules read them."""
    monkeypatch.setattr(k11, "_SMALL", (warps, g, None))
    monkeypatch.setattr(k11.k10, "_FIXED_BD", 4 * 32 * warps)
    if programs is not None:
        monkeypatch.setattr(k11.k10.k5, "MIN_PROGRAMS", programs)


def _via_011(rec, fn, *args):
    """The single Triton-path entry 011's `fn` makes for this call (no plan, no cache)."""
    rec.clear()
    k11.k10.LAUNCH_CACHE = False
    try:
        fn(*args)
    finally:
        k11.k10.LAUNCH_CACHE = True
    return [e for e in rec if e[0] == "triton"]


@pytest.mark.parametrize(
    "BTD, small",
    [((1, 4096, 768), True), ((2, 40, 24), True), ((3, 1000, 1300), True),
     ((4, 2048, 2048), False)],
)  # fmt: skip
def test_dense_fwd_launches_011s_at_the_forward_sweep_point(rec, monkeypatch, BTD, small):
    B, T, D = BTD
    x = torch.zeros(B, T, D, dtype=torch.bfloat16)
    w = torch.randn(D, 4)
    k13.cconv_fwd(x, w)
    (first,) = rec
    y = k13.cconv_fwd(x, w)
    _, grid, _, args = rec[-1]
    assert rec[-1][0] == "plan" and args[0] is x and args[1] is w and args[2] is y
    if small:
        _as_011(monkeypatch, 2, 8, 528)
    (t,) = _via_011(rec, k11.cconv_fwd, x, w)
    assert first[1] == t[1] and grid == t[1], (first[1], t[1])
    # every argument of the first (Triton-path) launch is 011's but y, each call's own output
    assert _same_args(first[2][:2] + first[2][3:], t[2][:2] + t[2][3:])
    assert first[3] == t[3]
    assert _same_args(args, _expect(t, k11._DENSE_FWD_L.kernel, args[:3]))
    if BTD == (1, 4096, 768):  # the sweep's shape: 768 programs of 16 rows, 256-wide strips
        assert grid == (3, 256, 1) and t[3]["G"] == 8 and t[3]["num_warps"] == 2


@pytest.mark.parametrize(
    "BTD, small", [((1, 4096, 768), True), ((2, 40, 24), True), ((4, 2048, 2048), False)]
)
def test_dense_bwd_launches_011s_at_the_backward_sweep_point(rec, monkeypatch, BTD, small):
    B, T, D = BTD
    x = torch.randn(B, T, D, dtype=torch.bfloat16)
    w = torch.randn(D, 3)
    dy = torch.randn(B, D, T, dtype=torch.bfloat16).transpose(1, 2)
    k13.cconv_bwd(x, w, dy)
    (first,) = rec
    dx, dw = k13.cconv_bwd(x, w, dy)
    _, grid, _, args = rec[-1]
    assert rec[-1][0] == "plan" and args[3] is dx and dw.shape == w.shape
    if small:
        _as_011(monkeypatch, 4, 8)
    (t,) = _via_011(rec, k11.cconv_bwd, x, w, dy)
    assert first[1] == t[1] == grid and first[3] == t[3]
    assert t[2][4].shape == args[4].shape
    assert _same_args(args, _expect(t, k11._DENSE_BWD_L.kernel, args[:5]))
    if BTD == (1, 4096, 768):  # 004's 64-row segments on 512-wide strips
        assert grid == (2, 64, 1) and t[3]["G"] == 8 and t[3]["num_warps"] == 4


@pytest.mark.parametrize("case", [c for c in CASE_OPTS if c[8]], ids=lambda c: c[0])
def test_case_bwd_with_an_initial_state_is_planned_as_011s_two_launches(rec, case):
    def inputs():
        a = _case_inputs(*case)
        a.pop("output_final_state")
        x = a["x"]
        n = a["cu_seqlens"].numel() - 1 if a["cu_seqlens"] is not None else x.shape[0]
        a["dht"] = torch.randn(n, x.shape[2], a["w"].shape[1], dtype=x.dtype)
        return a, torch.randn_like(x)

    a0, dy0 = inputs()
    k13.conv_bwd(a0.pop("x"), a0.pop("w"), dy0, **a0)
    assert k13.plans()["case_bwd_h0"] == 1
    a, dy = inputs()
    x, w = a.pop("x"), a.pop("w")
    hits = k13.plans()["hits"]
    rec.clear()
    dx, dw, db, dr, dh0 = k13.conv_bwd(x, w, dy, **a)
    assert k13.plans()["hits"] == hits + 1
    assert [e[0] for e in rec] == ["plan", "plan"]
    (_, g1, _, main), (_, g2, _, grad) = rec
    assert main[0] is x and main[5] is dy and main[7] is dx and grad[7] is dh0
    assert dh0.shape == a["initial_state"].shape and dh0.dtype == a["initial_state"].dtype
    assert dw.shape == w.shape and (db is None) == (a["bias"] is None)
    assert (dr is dy) == (a["residual"] is not None)
    rec.clear()
    k11.k10.LAUNCH_CACHE = False
    try:
        out11 = k11.conv_bwd(x, w, dy, **a)
    finally:
        k11.k10.LAUNCH_CACHE = True
    t1, t2 = [e for e in rec if e[0] == "triton"]
    assert (g1, g2) == (t1[1], t2[1])
    t1_args, t2_args = list(t1[2]), list(t2[2])
    assert t1_args[7] is out11[0] and t2_args[7] is out11[4]
    for i in (7, 8, 9):  # dx and the partials: this call's own buffers
        assert t1_args[i].shape == main[i].shape and t1_args[i].dtype == main[i].dtype
        t1_args[i] = main[i]
    t2_args[7] = grad[7]
    for t_args, mine in ((t1_args, main), (t2_args, grad)):
        for i in range(7):  # w, h0, dht: 011's contiguous copies of the same tensors
            assert t_args[i] is mine[i] or torch.equal(t_args[i], mine[i])
            t_args[i] = mine[i]
    kernel = (k11._CASE_BWD32_L if x.dtype == torch.float32 else k11._CASE_BWD_L).kernel
    assert _same_args(main, _expect(("triton", g1, tuple(t1_args), t1[3]), kernel, ()))
    assert _same_args(grad, _expect(("triton", g2, tuple(t2_args), t2[3]), k11._DH0_L.kernel, ()))


def _good():
    x = torch.randn(1, 30, 24, dtype=torch.bfloat16)
    return dict(
        x=x, w=torch.randn(24, 4), bias=torch.randn(24), residual=None,
        initial_state=torch.randn(4, 24, 4, dtype=torch.bfloat16), output_final_state=True,
        activation="silu", cu_seqlens=torch.tensor([0, 1, 3, 10, 30], dtype=torch.int32),
    )  # fmt: skip


BAD = {
    "cu_seqlens as a list": dict(cu_seqlens=[0, 1, 3, 10, 30]),
    "bias as a list": dict(bias=[0.0] * 24),
    "initial_state as a list": dict(initial_state=[[0.0] * 4] * 24),
    "ambiguous output_final_state": dict(output_final_state=torch.ones(2)),
    "unhashable activation": dict(activation=["silu"]),
    "unknown activation": dict(activation="gelu"),
    "x as a list": dict(x=[[[0.0] * 24] * 30]),
}


def _raised(fn, *args, **kwargs) -> tuple[type, str]:
    with pytest.raises(Exception) as info:  # noqa: B017 - whatever 011 raises is the reference
        fn(*args, **kwargs)
    return info.type, str(info.value)


@pytest.mark.parametrize("planned", [False, True], ids=["fresh", "after-a-plan"])
@pytest.mark.parametrize("bad", list(BAD), ids=list(BAD))
def test_bad_arguments_raise_011s_error(rec, bad, planned):
    if planned:
        g = _good()
        for _ in range(2):
            k13.conv_fwd(**g)
            dy = torch.randn_like(g["x"])
            kw = {k: v for k, v in g.items() if k not in ("x", "w", "output_final_state")}
            k13.conv_bwd(g["x"], g["w"], dy, **kw)
        assert k13.plans()["hits"] >= 2
    a = {**_good(), **BAD[bad]}
    want = _raised(k11.conv_fwd, **a)
    assert _raised(k13.conv_fwd, **a) == want
    if bad == "ambiguous output_final_state":  # the backward takes no such argument
        return
    a.pop("output_final_state")
    x, w = a.pop("x"), a.pop("w")
    dy = torch.zeros(1, 30, 24, dtype=torch.bfloat16)
    want = _raised(k11.conv_bwd, x, w, dy, **a)
    assert _raised(k13.conv_bwd, x, w, dy, **a) == want
