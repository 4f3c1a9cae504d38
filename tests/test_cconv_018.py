"""cconv idea 018 on the CPU.

- On Triton's interpreter, 018's case loop (``loops.py``) gives 007's kernel's outputs bit for
  bit for packed batches whose programs take the loop-free sequence step (several sequence
  starts and empty sequences crossed in one step), the fallback loop (a program spanning K or
  more sequence starts) or both in one launch, with states, dht and bias, ragged segments and
  rows past the batch's end; and for an unpacked call with states.
- On the launch recorder, a packed backward launches 017's grid, arguments and configuration
  with K and NSTG = CCONV_PACKED_BWD_STAGES; every other call launches as 017 does (K added).
The GPU half is tests/test_cconv_018_gpu.py.
"""

from __future__ import annotations

import pytest
from ladder.kernels.cconv.ideas.i002.kernel import SMALL_WORK
from ladder.kernels.cconv.ideas.i013 import kernel as k13
from ladder.kernels.cconv.ideas.i015 import kernel as k15
from ladder.kernels.cconv.ideas.i016 import kernel as k16
from ladder.kernels.cconv.ideas.i017 import kernel as k17
from ladder.kernels.cconv.ideas.i018 import kernel as k18

import ladder  # noqa: F401  (the idea import finder)
from tests.cconv_recorder import _same_args, recording
from tests.interpreted import run_interpreted
from tests.test_cconv_016 import CASES, _inputs
from tests.test_cconv_017 import BIAS_LARGE, PACKED_LARGE

LOOP = r"""
import json
import torch
import ladder  # noqa: F401
from ladder.kernels.cconv.ideas.i002 import kernel as box
from ladder.kernels.cconv.ideas.i007 import kernel as k7
from ladder.kernels.cconv.ideas.i018 import loops

rows = []
torch.manual_seed(0)
for name, lengths, D, W, TS, BD, G, K, bias, h0, dht, act in [
    # every program fits K = 16 (T 70 with TS 16: the last segment runs past the end)
    ("fits", [1, 4, 25, 40], 64, 4, 16, 64, 8, 16, True, True, True, None),
    # empty sequences: steps crossing three starts at once, under K = 8
    ("empty-fits", [10, 0, 20, 0, 0, 30], 32, 3, 32, 32, 4, 8, False, True, True, "silu"),
    # K = 2: programs over many short sequences fall back, those inside the long one do not
    ("mixed", [3, 0, 0, 1, 2, 0, 5, 1, 1, 1, 40, 0, 2, 30], 48, 4, 16, 64, 8, 2, True, False,
     True, "silu"),
    # an unpacked call with states (one batch row per sequence)
    ("state", None, 100, 2, 16, 64, 4, 16, False, True, True, "silu"),
]:
    if lengths is None:
        B, T, N, cu = 2, 50, 2, None
    else:
        B, T, N = 1, sum(lengths), len(lengths)
        cu = torch.tensor([0] + [sum(lengths[:i + 1]) for i in range(N)], dtype=torch.int32)
    x = torch.randn(B, T, D, dtype=torch.bfloat16)
    dy = torch.randn(B, D, T, dtype=torch.bfloat16).transpose(1, 2)
    w = torch.randn(D, W).to(torch.bfloat16)
    b = torch.randn(D) if bias else w
    hs = torch.randn(N, D, W, dtype=torch.bfloat16) if h0 else w
    dh = torch.randn(N, D, W, dtype=torch.bfloat16) if dht else w
    NS = -(-T // TS)
    kw = dict(W=W, ACT=box.ACTIVATIONS[act], FAST=False, HAS_BIAS=bias, HAS_H0=h0,
              HAS_DHT=dht, VARLEN=cu is not None, EVEN_T=T % TS == 0, BD=BD, G=G, num_warps=1)
    out = {}
    for label, kernel, extra in (("007", k7.case_bwd_kernel, {}),
                                 ("018", loops.case_bwd_kernel, {"NSTG": 3, "K": K})):
        dx = torch.full((B, T, D), float("nan"), dtype=torch.bfloat16)
        dwp = torch.full((B * NS, D, W), float("nan"))
        dbp = torch.full((B * NS, D), float("nan")) if bias else dwp
        kernel[(-(-D // BD), NS, B)](
            x, w, b, hs, cu if cu is not None else w, dy, dh, dx, dwp, dbp, T, D, N, TS, NS,
            box._work_bucket(B * T * D), *x.stride(), *dy.stride(), dx.stride(0), dx.stride(1),
            **kw, **extra)
        out[label] = (dx, dwp) + ((dbp,) if bias else ())
    # which programs take the loop-free step: their rows t0 .. t0 + TS + 2 span fewer than K
    # sequence starts past the first
    fits = []
    if cu is not None:
        starts = cu[:-1].tolist()
        for s in range(NS):
            t0 = s * TS
            first = max(i for i in range(N) if starts[i] <= t0)
            last = max(i for i in range(N) if starts[i] <= t0 + TS + 2)
            fits.append(last - first < K)
    same = all(torch.equal(p, q) for p, q in zip(out["007"], out["018"]))
    finite = all(bool(torch.isfinite(t).all()) for t in out["018"])
    nonzero = bool(out["018"][0].abs().sum() > 0)
    rows.append({"case": name, "same": same, "finite": finite, "nonzero": nonzero,
                 "fits": fits})
print(json.dumps(rows))
"""


def test_case_loop_equals_007s_bit_for_bit_on_the_interpreter() -> None:
    rows = {r["case"]: r for r in run_interpreted(LOOP)}
    assert list(rows) == ["fits", "empty-fits", "mixed", "state"]
    for r in rows.values():
        assert r["same"] and r["finite"] and r["nonzero"], r
    # the cases cover what they say: the loop-free step everywhere, then both loops
    assert all(rows["fits"]["fits"]) and all(rows["empty-fits"]["fits"])
    assert any(rows["mixed"]["fits"]) and not all(rows["mixed"]["fits"])


@pytest.fixture
def rec(monkeypatch):
    """The launch log (017's and 018's case loops logged like 011's kernels), plans empty."""
    caches = (k15._DENSE_FWD_L, k15._DENSE_BWD_L, k16._CASE_BWD_L, k17._CASE_BWD_L, k18._CASE_BWD_L)
    tables = (
        k18._CASE_BWD,
        k17._CASE_BWD,
        k16._CASE_BWD,
        k15._FWD,
        k15._BWD,
        k13._CASE_BWD,
        k13._CASE_BWD_H0,
        k13._DH0,
    )
    yield from recording(monkeypatch, caches, tables)


ALL = CASES + [PACKED_LARGE, BIAS_LARGE]


@pytest.mark.parametrize("case", ALL, ids=[c[0] for c in ALL])
def test_case_bwd_launches_017s_with_k_and_the_packed_stage_count(rec, case):
    a = _inputs(*case)
    k18.conv_bwd(**a)
    mine = [e for e in rec if e[0] == "triton"]
    assert len(mine) == (2 if a["initial_state"] is not None else 1)
    rec.clear()
    dx, dw, db, dres, dh0 = k18.conv_bwd(**a)
    planned = [e for e in rec if e[0] == "plan"]
    assert not [e for e in rec if e[0] == "triton"] and len(planned) == len(mine)
    assert planned[0][3][0] is a["x"] and planned[0][3][5] is a["dy"] and planned[0][3][7] is dx
    assert (dh0 is None) == (a["initial_state"] is None) and dres is None
    rec.clear()
    k17.conv_bwd(**a)
    theirs = [e for e in rec if e[0] == "triton"]
    kw, kw17 = dict(mine[0][3]), dict(theirs[0][3])
    assert kw.pop("K") == k18.SEQ_LOOKAHEAD
    packed_big = a["cu_seqlens"] is not None and a["x"].numel() >= SMALL_WORK
    assert kw.pop("NSTG") == (k18.PACKED_BWD_STAGES if packed_big else kw17["NSTG"])
    kw17.pop("NSTG")
    assert kw == kw17 and mine[0][1] == theirs[0][1]
    assert _same_args(mine[0][2][:7] + mine[0][2][10:], theirs[0][2][:7] + theirs[0][2][10:])
    if dh0 is not None:
        assert mine[1][1] == theirs[1][1] and mine[1][3] == theirs[1][3]
        assert _same_args(mine[1][2][:7] + mine[1][2][8:], theirs[1][2][:7] + theirs[1][2][8:])


def test_the_stage_rule() -> None:
    big = SMALL_WORK
    assert k18.stages(big - 1, True, True) == 1
    assert k18.stages(big, False, True) == k18.PACKED_BWD_STAGES
    assert k18.stages(big, True, True) == k18.PACKED_BWD_STAGES
    assert k18.stages(big, True, False) == k17.STATE_BWD_STAGES
    assert k18.stages(big, False, False) == k17.CASE_BWD_STAGES
    assert k18.SEQ_LOOKAHEAD > 0 and k18.SEQ_LOOKAHEAD & (k18.SEQ_LOOKAHEAD - 1) == 0


def test_plans_and_launches_count_018s_table(rec):
    a = _inputs(*CASES[2])  # packed, with states
    before = k18.plans()
    k18.conv_bwd(**a)
    k18.conv_bwd(**a)
    after = k18.plans()
    assert after["case_bwd_h0"] == before["case_bwd_h0"] + 1 and len(k17._CASE_BWD) == 0
    assert after["hits"] == before["hits"] + 1 and after["misses"] == before["misses"] + 1
    assert k18.launches()["case_bwd"][1] >= 1
