"""cconv idea 016 on the CPU.

- On Triton's interpreter, the pipelined case loop (``loops.py``) gives 007's kernel's
  outputs bit for bit (bias, initial state and its gradient's input dht, packed sequences,
  no activation, W 2 to 4, ragged segments, strided x and dy, NSTG 2 and 3).
- On the launch recorder (tests/cconv_recorder.py), a case backward with fp16 or bf16 x
  launches 013's grid, arguments and configuration plus NSTG (the knob from CCONV_SMALL_WORK
  up, 1 below), with an initial state both of 013's launches; a repeated call is served by
  its plans with its own tensors; fp32 x, the dense case and bad arguments are 015's.
The GPU half (agreement with 013 in every case, planned and captured) is
tests/test_cconv_016_gpu.py.
"""

from __future__ import annotations

import pytest
import torch
from ladder.kernels.cconv.ideas.i013 import kernel as k13
from ladder.kernels.cconv.ideas.i015 import kernel as k15
from ladder.kernels.cconv.ideas.i016 import kernel as k16

import ladder  # noqa: F401  (the idea import finder)
from tests.cconv_recorder import _expect, _same_args, recording
from tests.interpreted import run_interpreted

LOOP = r"""
import json
import torch
import ladder  # noqa: F401
from ladder.kernels.cconv.ideas.i002 import kernel as box
from ladder.kernels.cconv.ideas.i007 import kernel as k7
from ladder.kernels.cconv.ideas.i016 import loops

rows = []
torch.manual_seed(0)
for name, B, T, D, W, TS, BD, G, nstg, bias, h0, dht, packed, act, strided in [
    ("bias", 2, 64, 128, 4, 32, 128, 8, 3, True, False, False, False, "silu", False),
    ("state", 2, 50, 100, 3, 16, 64, 4, 2, False, True, True, False, "silu", True),
    ("packed", 1, 70, 64, 4, 16, 64, 8, 3, True, True, True, True, None, False),
    ("packed-final", 1, 45, 32, 2, 16, 32, 4, 3, False, False, True, True, "silu", True),
]:
    def mk(shape):
        if strided:
            return torch.randn(shape[0], shape[2], shape[1], dtype=torch.bfloat16).transpose(1, 2)
        return torch.randn(*shape, dtype=torch.bfloat16)
    x, dy = mk((B, T, D)), mk((B, T, D))
    w = torch.randn(D, W).to(torch.bfloat16)
    cu = torch.tensor([0, 1, 5, 30, T], dtype=torch.int32) if packed else None
    N = 4 if packed else B
    b = torch.randn(D) if bias else w
    hs = torch.randn(N, D, W, dtype=torch.bfloat16) if h0 else w
    dh = torch.randn(N, D, W, dtype=torch.bfloat16) if dht else w
    NS = -(-T // TS)
    kw = dict(W=W, ACT=box.ACTIVATIONS[act], FAST=False, HAS_BIAS=bias, HAS_H0=h0,
              HAS_DHT=dht, VARLEN=packed, EVEN_T=T % TS == 0, BD=BD, G=G, num_warps=1)
    out = {}
    for label, kernel, extra in (("007", k7.case_bwd_kernel, {}),
                                 ("016", loops.case_bwd_kernel, {"NSTG": nstg})):
        dx = torch.full((B, T, D), float("nan"), dtype=torch.bfloat16)
        dwp = torch.full((B * NS, D, W), float("nan"))
        dbp = torch.full((B * NS, D), float("nan")) if bias else dwp
        kernel[(-(-D // BD), NS, B)](
            x, w, b, hs, cu if packed else w, dy, dh, dx, dwp, dbp, T, D, N, TS, NS,
            box._work_bucket(B * T * D), *x.stride(), *dy.stride(), dx.stride(0), dx.stride(1),
            **kw, **extra)
        out[label] = (dx, dwp) + ((dbp,) if bias else ())
    same = all(torch.equal(p, q) for p, q in zip(out["007"], out["016"]))
    finite = all(bool(torch.isfinite(t).all()) for t in out["016"])
    nonzero = bool(out["016"][0].abs().sum() > 0)
    rows.append({"case": name, "same": same, "finite": finite, "nonzero": nonzero})
print(json.dumps(rows))
"""


def test_pipelined_case_loop_equals_007s_bit_for_bit_on_the_interpreter() -> None:
    rows = run_interpreted(LOOP)
    assert [r["case"] for r in rows] == ["bias", "state", "packed", "packed-final"]
    for r in rows:
        assert r["same"] and r["finite"] and r["nonzero"], r


@pytest.fixture
def rec(monkeypatch):
    """The launch log, 015's and 016's loops logged like 011's kernels, plans empty."""
    yield from recording(
        monkeypatch, (k15._DENSE_FWD_L, k15._DENSE_BWD_L, k16._CASE_BWD_L),
        (k16._CASE_BWD, k15._FWD, k15._BWD, k13._CASE_BWD, k13._CASE_BWD_H0, k13._DH0),
    )  # fmt: skip


CASES = [
    # (name, B, T, D, W, x dtype, bias, h0, dht, packed, activation, small)
    ("bias", 2, 99, 48, 4, torch.bfloat16, True, False, False, False, "silu", True),
    ("state", 3, 17, 40, 3, torch.float16, False, True, True, False, "silu", True),
    ("packed", 1, 30, 24, 4, torch.bfloat16, True, True, True, True, "swish", True),
    ("final-only", 2, 50, 24, 4, torch.bfloat16, False, False, True, False, "silu", True),
    ("noact-large", 2, 2048, 1536, 2, torch.bfloat16, True, False, False, False, None, False),
    ("state-large", 2, 1024, 2048, 4, torch.bfloat16, False, True, True, False, "silu", False),
]


def _inputs(name, B, T, D, W, dtype, bias, h0, dht, packed, act, small):
    x = torch.randn(B, T, D, dtype=dtype)
    cu = torch.tensor([0, 1, 3, 10, T], dtype=torch.int32) if packed else None
    N = 4 if packed else B
    return dict(
        x=x, w=torch.randn(D, W), dy=torch.randn(B, D, T, dtype=dtype).transpose(1, 2),
        bias=torch.randn(D) if bias else None, residual=None,
        initial_state=torch.randn(N, D, W, dtype=dtype) if h0 else None,
        dht=torch.randn(N, D, W, dtype=dtype) if dht else None,
        activation=act, cu_seqlens=cu,
    )  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_case_bwd_launches_013s_with_the_stage_count(rec, case):
    a = _inputs(*case)
    k16.conv_bwd(**a)
    first = [e for e in rec if e[0] == "triton"]
    assert len(first) == (2 if a["initial_state"] is not None else 1)
    rec.clear()
    dx, dw, db, dres, dh0 = k16.conv_bwd(**a)
    planned = [e for e in rec if e[0] == "plan"]
    assert not [e for e in rec if e[0] == "triton"] and len(planned) == len(first)
    _, grid, _, args = planned[0]
    assert args[0] is a["x"] and args[5] is a["dy"] and args[7] is dx
    assert (dh0 is None) == (a["initial_state"] is None) and dres is None
    if dh0 is not None:
        assert planned[1][3][7] is dh0
    # 013's launches for the same call
    rec.clear()
    k13.conv_bwd(**a)
    theirs = [e for e in rec if e[0] == "triton"]
    assert len(theirs) == len(first)
    kw = dict(first[0][3])
    assert kw.pop("NSTG") == (1 if case[-1] else k16.CASE_BWD_STAGES)
    assert kw == theirs[0][3] and first[0][1] == theirs[0][1] == grid
    # every argument but the call's own outputs (dx, dwp, dbp) is 013's
    assert _same_args(first[0][2][:7] + first[0][2][10:], theirs[0][2][:7] + theirs[0][2][10:])
    assert _same_args(args, _expect(first[0], k16._CASE_BWD_L.kernel, args[:10]))
    if dh0 is not None:  # the initial-state gradient: 002's kernel, as 013 launches it
        assert first[1][1] == theirs[1][1] and first[1][3] == theirs[1][3]
        assert _same_args(first[1][2][:7] + first[1][2][8:], theirs[1][2][:7] + theirs[1][2][8:])


def _kernels_of(rec) -> list:
    """The JIT functions the Triton-path launches of the log went to, by their keywords."""
    out = []
    for e in rec:
        if e[0] != "triton":
            continue
        kw = e[3]
        if "NSTG" in kw:
            out.append("case16" if "HAS_DHT" in kw else "dense15")
        else:
            out.append("kahan" if "HAS_DHT" in kw and "FAST" not in kw else "011")
    return out


def test_fp32_x_and_the_dense_case_are_015s(rec):
    x32 = torch.randn(2, 64, 32)
    w = torch.randn(32, 4)
    k16.conv_bwd(x32, w, torch.randn_like(x32), bias=torch.randn(32))
    assert _kernels_of(rec) == ["kahan"]
    rec.clear()
    x = torch.randn(2, 64, 32, dtype=torch.bfloat16)
    k16.conv_bwd(x, w, torch.randn_like(x))
    assert _kernels_of(rec) == ["dense15"]
    rec.clear()
    k16.conv_bwd(x, w, torch.randn_like(x), bias=torch.randn(32))
    assert _kernels_of(rec) == ["case16"]


@pytest.mark.parametrize(
    "bad",
    [
        dict(dy=torch.randn(2, 9, 4, dtype=torch.bfloat16)),
        dict(w=torch.randn(5, 4)),
        dict(bias=torch.randn(5)),
        dict(initial_state=torch.randn(3, 4, 4, dtype=torch.bfloat16)),
        dict(dht=torch.randn(2, 4, 3, dtype=torch.bfloat16)),
        dict(activation="relu"),
        dict(bias="b"),
        dict(cu_seqlens=torch.tensor([0, 3, 8], dtype=torch.int32)),
    ],
    ids=["dy", "w", "bias", "h0", "dht", "relu", "bias-str", "packed-B2"],
)
def test_bad_arguments_raise_015s_error_before_any_launch(rec, bad):
    a = dict(
        x=torch.randn(2, 8, 4, dtype=torch.bfloat16), w=torch.randn(4, 4),
        dy=torch.randn(2, 8, 4, dtype=torch.bfloat16), bias=torch.randn(4),
    )  # fmt: skip
    a.update(bad)
    with pytest.raises(Exception) as ours:
        k16.conv_bwd(**a)
    launched = [e for e in rec if e[0] == "triton"]
    with pytest.raises(Exception) as theirs:
        k15.conv_bwd(**a)
    assert type(ours.value) is type(theirs.value) and str(ours.value) == str(theirs.value)
    assert launched == []


def test_plans_and_launches_count_the_case_loop(rec):
    a = _inputs(*CASES[1])
    before = k16.plans()
    k16.conv_bwd(**a)
    k16.conv_bwd(**a)
    after = k16.plans()
    assert after["case_bwd_h0"] == before["case_bwd_h0"] + 1
    assert after["hits"] == before["hits"] + 1 and after["misses"] == before["misses"] + 1
    assert k16.launches()["case_bwd"][1] >= 1
