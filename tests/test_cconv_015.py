"""cconv idea 015 on the CPU.

- On Triton's interpreter, the pipelined loops (``loops.py``) give 004's kernels' outputs bit
  for bit at every stage count, W and segment shape tried (ragged last segment, D not a
  multiple of the strip, strided x and dy).
- On the launch recorder (tests/cconv_recorder.py), the dense entry points launch 013's
  grid, arguments and configuration with NSTG = the stage knob from CCONV_SMALL_WORK up and
  1 below it, and a repeated call is served by its plan with the call's own tensors;
  ``conv_fwd`` / ``conv_bwd`` send the dense case there and every other call to 014.
The GPU half (bit-equality with 013, every case, planned and captured) is
tests/test_cconv_015_gpu.py.
"""

from __future__ import annotations

import pytest
import torch
from ladder.kernels.cconv.ideas.i013 import kernel as k13
from ladder.kernels.cconv.ideas.i014 import kernel as k14
from ladder.kernels.cconv.ideas.i015 import kernel as k15

import ladder  # noqa: F401  (the idea import finder)
from tests.cconv_recorder import _expect, _same_args, recording
from tests.interpreted import run_interpreted

LOOPS = r"""
import json
import torch
import ladder  # noqa: F401
from ladder.kernels.cconv.ideas.i004 import kernel as k4
from ladder.kernels.cconv.ideas.i015 import loops

rows = []
torch.manual_seed(0)
for B, T, D, W, TS, BD, G, nstg, strided in [
    (2, 64, 128, 4, 32, 128, 8, 3, False),
    (1, 50, 100, 3, 16, 64, 4, 2, True),
    (2, 40, 64, 2, 32, 64, 8, 4, False),
    (1, 24, 32, 1, 16, 32, 4, 3, True),
]:
    if strided:
        x = torch.randn(B, D, T, dtype=torch.bfloat16).transpose(1, 2)
        dy = torch.randn(B, D, T, dtype=torch.bfloat16).transpose(1, 2)
    else:
        x = torch.randn(B, T, D, dtype=torch.bfloat16)
        dy = torch.randn(B, T, D, dtype=torch.bfloat16)
    w = torch.randn(D, W).to(torch.bfloat16)
    NS = -(-T // TS)
    work = k4._work_bucket(B, T, D)
    kw = dict(BD=BD, G=G, num_warps=1, W=W, FAST=False, EVEN_T=T % TS == 0)
    out = {}
    for name, fwd, bwd, extra in (
        ("004", k4.cconv_fwd_kernel, k4.cconv_bwd_kernel, {}),
        ("015", loops.dense_fwd_kernel, loops.dense_bwd_kernel, {"NSTG": nstg}),
    ):
        y = torch.full((B, T, D), float("nan"), dtype=torch.bfloat16)
        grid = (-(-D // BD), NS, B)
        fwd[grid](x, w, y, T, D, TS, work, *x.stride(), y.stride(0), y.stride(1), **kw, **extra)
        dx = torch.full((B, T, D), float("nan"), dtype=torch.bfloat16)
        dwp = torch.full((B * NS, D, W), float("nan"))
        bwd[grid](x, w, dy, dx, dwp, T, D, TS, NS, work, *x.stride(), *dy.stride(),
                  dx.stride(0), dx.stride(1), **kw, **extra)
        out[name] = (y, dx, dwp)
    same = all(torch.equal(a, b) for a, b in zip(out["004"], out["015"]))
    finite = all(bool(torch.isfinite(t).all()) for t in out["015"])
    # and the forward is the conv itself (fp64 reference), so the comparison is not vacuous
    xf = torch.nn.functional.pad(x.double().transpose(1, 2), (W - 1, 0))
    z = torch.nn.functional.conv1d(xf, w.double().unsqueeze(1), groups=D).transpose(1, 2)
    err = ((out["015"][0].double() - z * torch.sigmoid(z)).norm() / z.norm()).item()
    rows.append({"case": [B, T, D, W, TS, nstg, strided], "same": same, "finite": finite,
                 "err": err})
print(json.dumps(rows))
"""


def test_pipelined_loops_equal_004s_bit_for_bit_on_the_interpreter() -> None:
    rows = run_interpreted(LOOPS)
    assert len(rows) == 4
    for r in rows:
        assert r["same"] and r["finite"], r
        assert r["err"] < 1e-2, r


TABLES = (k15._FWD, k15._BWD, k13._FWD, k13._BWD, k13._CASE_FWD, k13._CASE_BWD)


@pytest.fixture
def rec(monkeypatch):
    """The launch log of tests/cconv_recorder.py, 015's two loops logged like 011's kernels,
    every plan table empty before and after."""
    yield from recording(monkeypatch, (k15._DENSE_FWD_L, k15._DENSE_BWD_L), TABLES)


def _via_013(rec, fn, *args):
    """The Triton-path launch 013's `fn` makes for this call (its plans emptied first)."""
    k13._FWD.clear()
    k13._BWD.clear()
    rec.clear()
    fn(*args)
    (t,) = [e for e in rec if e[0] == "triton"]
    return t


@pytest.mark.parametrize(
    "BTD, small", [((1, 4096, 768), True), ((2, 40, 24), True), ((4, 2048, 2048), False)]
)
def test_dense_fwd_launches_013s_with_the_stage_count(rec, BTD, small):
    B, T, D = BTD
    x = torch.zeros(B, T, D, dtype=torch.bfloat16)
    w = torch.randn(D, 4)
    k15.cconv_fwd(x, w)
    (first,) = rec
    y = k15.cconv_fwd(x, w)
    _, grid, _, args = rec[-1]
    assert rec[-1][0] == "plan" and args[0] is x and args[1] is w and args[2] is y
    t = _via_013(rec, k13.cconv_fwd, x, w)
    assert first[1] == t[1] == grid
    assert _same_args(first[2][:2] + first[2][3:], t[2][:2] + t[2][3:])
    kw = dict(first[3])
    assert kw.pop("NSTG") == (1 if small else k15.FWD_STAGES)
    assert kw == t[3]
    assert _same_args(args, _expect(first, k15._DENSE_FWD_L.kernel, args[:3]))


@pytest.mark.parametrize(
    "BTD, small", [((1, 4096, 768), True), ((2, 40, 24), True), ((4, 2048, 2048), False)]
)
def test_dense_bwd_launches_013s_with_the_stage_count(rec, BTD, small):
    B, T, D = BTD
    x = torch.randn(B, T, D, dtype=torch.bfloat16)
    w = torch.randn(D, 3)
    dy = torch.randn(B, D, T, dtype=torch.bfloat16).transpose(1, 2)
    k15.cconv_bwd(x, w, dy)
    (first,) = rec
    dx, dw = k15.cconv_bwd(x, w, dy)
    _, grid, _, args = rec[-1]
    assert rec[-1][0] == "plan" and args[3] is dx and dw.shape == w.shape
    t = _via_013(rec, k13.cconv_bwd, x, w, dy)
    assert first[1] == t[1] == grid
    kw = dict(first[3])
    assert kw.pop("NSTG") == (1 if small else k15.BWD_STAGES)
    assert kw == t[3]
    assert t[2][4].shape == args[4].shape
    assert _same_args(args, _expect(first, k15._DENSE_BWD_L.kernel, args[:5]))


def _kernel_of(entry) -> str:
    """Which kernel a Triton-path log entry launched, by its keyword arguments."""
    return "loops" if "NSTG" in entry[3] else "011"


@pytest.mark.parametrize(
    "opts, dense",
    [
        ({}, True),
        ({"residual": True}, False),
        ({"output_final_state": True}, False),
        ({"bias": True}, False),
        ({"activation": None}, False),
        ({"activation": "swish"}, True),
    ],
)
def test_conv_fwd_takes_the_loops_for_the_dense_case_only(rec, opts, dense):
    B, T, D, W = 2, 64, 32, 4
    x = torch.randn(B, T, D, dtype=torch.bfloat16)
    w = torch.randn(D, W)
    kw = {
        "residual": torch.randn_like(x) if opts.get("residual") else None,
        "bias": torch.randn(D) if opts.get("bias") else None,
        "output_final_state": bool(opts.get("output_final_state")),
        "activation": opts.get("activation", "silu"),
    }
    y, hT = k15.conv_fwd(x, w, **kw)
    launched = [_kernel_of(e) for e in rec if e[0] == "triton"]
    assert launched and all(k == ("loops" if dense else "011") for k in launched), launched
    assert (hT is not None) == kw["output_final_state"]
    assert y.shape == x.shape


@pytest.mark.parametrize("dht, bias, dense", [(False, False, True), (True, False, False),
                                              (False, True, False)])  # fmt: skip
def test_conv_bwd_takes_the_loops_for_the_dense_case_only(rec, dht, bias, dense):
    B, T, D, W = 2, 64, 32, 4
    x = torch.randn(B, T, D, dtype=torch.bfloat16)
    w = torch.randn(D, W)
    dy = torch.randn_like(x)
    out = k15.conv_bwd(
        x, w, dy, torch.randn(D) if bias else None, None, None,
        torch.randn(B, D, W, dtype=torch.bfloat16) if dht else None,
    )  # fmt: skip
    launched = [_kernel_of(e) for e in rec if e[0] == "triton"]
    assert launched and all(k == ("loops" if dense else "011") for k in launched), launched
    assert out[0].shape == x.shape and out[1].shape == w.shape


@pytest.mark.parametrize(
    "call",
    [
        lambda: k15.conv_fwd(torch.randn(2, 8, 4, dtype=torch.bfloat16), torch.randn(5, 4)),
        lambda: k15.conv_fwd(torch.randn(2, 8, 4, dtype=torch.bfloat16), torch.randn(4, 5)),
        lambda: k15.conv_fwd(torch.randn(8, 4), torch.randn(4, 4)),
        lambda: k15.conv_fwd(torch.randn(2, 8, 4, dtype=torch.bfloat16), torch.randn(4, 4),
                             activation="relu"),
        lambda: k15.conv_fwd(torch.randn(2, 8, 4, dtype=torch.bfloat16), "w"),
        lambda: k15.conv_bwd(torch.randn(2, 8, 4, dtype=torch.bfloat16), torch.randn(4, 4),
                             torch.randn(2, 9, 4, dtype=torch.bfloat16)),
        lambda: k15.conv_bwd(torch.randn(2, 8, 4, dtype=torch.bfloat16), torch.randn(5, 4),
                             torch.randn(2, 8, 4, dtype=torch.bfloat16)),
    ],
    ids=["w-D", "w-W", "x-2d", "relu", "w-str", "bwd-dy", "bwd-w-D"],
)  # fmt: skip
def test_bad_arguments_raise_014s_error_before_any_launch(rec, call):
    with pytest.raises(Exception) as ours:
        call()
    ours_launched = [e for e in rec if e[0] == "triton"]
    rec.clear()
    real = (k15.conv_fwd, k15.conv_bwd)
    try:
        k15.conv_fwd, k15.conv_bwd = k14.conv_fwd, k14.conv_bwd
        with pytest.raises(Exception) as theirs:
            call()
    finally:
        k15.conv_fwd, k15.conv_bwd = real
    assert type(ours.value) is type(theirs.value)
    assert str(ours.value) == str(theirs.value)
    assert ours_launched == [e for e in rec if e[0] == "triton"] == []


def test_launch_counts_name_the_pipelined_loops(rec):
    x = torch.randn(2, 64, 32, dtype=torch.bfloat16)
    w = torch.randn(32, 4)
    k15.cconv_fwd(x, w)
    k15.cconv_fwd(x, w)
    assert k15.plans()["dense_fwd"] == 1 and k15.plans()["hits"] >= 1
    assert k15.launches()["dense_fwd"][1] >= 1
