"""cconv idea 017 on the CPU (the launch recorder, tests/cconv_recorder.py).

A case backward launches 016's kernel with 016's grid, arguments and configuration; only NSTG
differs, as ``stages`` says: 1 below CCONV_SMALL_WORK and for packed calls,
CCONV_STATE_BWD_STAGES with an initial state or dht, CCONV_CASE_BWD_STAGES otherwise. A
repeated call is served by 017's own plans; fp32 x, the dense case and bad arguments are
016's (015's). The GPU half is tests/test_cconv_017_gpu.py.
"""

from __future__ import annotations

import pytest
import torch
from ladder.kernels.cconv.ideas.i002.kernel import SMALL_WORK
from ladder.kernels.cconv.ideas.i013 import kernel as k13
from ladder.kernels.cconv.ideas.i015 import kernel as k15
from ladder.kernels.cconv.ideas.i016 import kernel as k16
from ladder.kernels.cconv.ideas.i017 import kernel as k17

import ladder  # noqa: F401  (the idea import finder)
from tests.cconv_recorder import _same_args, recording
from tests.test_cconv_016 import CASES, _inputs

# a packed call above CCONV_SMALL_WORK: its loop takes NSTG 1 all the same
PACKED_LARGE = ("packed-large", 1, 4096, 1536, 4, torch.bfloat16, True, False, True, True,
                "silu", False)  # fmt: skip
BIAS_LARGE = ("bias-large-fp16", 2, 2048, 1536, 3, torch.float16, True, False, False, False,
              "silu", False)  # fmt: skip
ALL = CASES + [PACKED_LARGE, BIAS_LARGE]


@pytest.fixture
def rec(monkeypatch):
    """The launch log (016's and 017's case loop logged like 011's kernels), plans empty."""
    caches = (k15._DENSE_FWD_L, k15._DENSE_BWD_L, k16._CASE_BWD_L, k17._CASE_BWD_L)
    tables = (
        k17._CASE_BWD,
        k16._CASE_BWD,
        k15._FWD,
        k15._BWD,
        k13._CASE_BWD,
        k13._CASE_BWD_H0,
        k13._DH0,
    )
    yield from recording(monkeypatch, caches, tables)


def _expected_nstg(a: dict) -> int:
    x = a["x"]
    if x.numel() < SMALL_WORK or a["cu_seqlens"] is not None:
        return 1
    if a["initial_state"] is not None or a["dht"] is not None:
        return k17.STATE_BWD_STAGES
    return k17.CASE_BWD_STAGES


def test_the_stage_rule() -> None:
    big = SMALL_WORK
    assert k17.stages(big - 1, False, False) == 1 and k17.stages(big - 1, True, False) == 1
    assert k17.stages(big, False, True) == 1 and k17.stages(big, True, True) == 1
    assert k17.stages(big, True, False) == k17.STATE_BWD_STAGES
    assert k17.stages(big, False, False) == k17.CASE_BWD_STAGES == k16.CASE_BWD_STAGES
    # the defaults the NOTES' probe chose (a knob set in the environment moves them)
    import os

    if "CCONV_STATE_BWD_STAGES" not in os.environ:
        assert k17.STATE_BWD_STAGES == 2
    if "CCONV_CASE_BWD_STAGES" not in os.environ:
        assert k17.CASE_BWD_STAGES == 3


@pytest.mark.parametrize("case", ALL, ids=[c[0] for c in ALL])
def test_case_bwd_launches_016s_but_for_the_stage_count(rec, case):
    a = _inputs(*case)
    k17.conv_bwd(**a)
    mine = [e for e in rec if e[0] == "triton"]
    assert len(mine) == (2 if a["initial_state"] is not None else 1)
    rec.clear()
    dx, dw, db, dres, dh0 = k17.conv_bwd(**a)
    planned = [e for e in rec if e[0] == "plan"]
    assert not [e for e in rec if e[0] == "triton"] and len(planned) == len(mine)
    assert planned[0][3][0] is a["x"] and planned[0][3][5] is a["dy"] and planned[0][3][7] is dx
    assert (dh0 is None) == (a["initial_state"] is None) and dres is None
    assert dw.shape == a["w"].shape and (db is None) == (a["bias"] is None)
    rec.clear()
    k16.conv_bwd(**a)
    theirs = [e for e in rec if e[0] == "triton"]
    assert len(theirs) == len(mine)
    kw, kw16 = dict(mine[0][3]), dict(theirs[0][3])
    assert kw.pop("NSTG") == _expected_nstg(a)
    assert kw16.pop("NSTG") == (1 if case[-1] else k16.CASE_BWD_STAGES)
    assert kw == kw16 and mine[0][1] == theirs[0][1]
    # every argument but the call's own outputs (dx, dwp, dbp) is 016's
    assert _same_args(mine[0][2][:7] + mine[0][2][10:], theirs[0][2][:7] + theirs[0][2][10:])
    if dh0 is not None:  # the initial-state gradient: 016's launch
        assert mine[1][1] == theirs[1][1] and mine[1][3] == theirs[1][3]
        assert _same_args(mine[1][2][:7] + mine[1][2][8:], theirs[1][2][:7] + theirs[1][2][8:])


def test_the_state_stage_count_follows_its_knob(rec, monkeypatch):
    monkeypatch.setattr(k17, "STATE_BWD_STAGES", 4)
    a = _inputs(*CASES[-1])  # state-large: an initial state and dht above CCONV_SMALL_WORK
    k17.conv_bwd(**a)
    assert [e[3]["NSTG"] for e in rec if e[0] == "triton" and "NSTG" in e[3]] == [4]


def test_fp32_x_and_the_dense_case_are_016s(rec):
    x32 = torch.randn(2, 64, 32)
    w = torch.randn(32, 4)
    k17.conv_bwd(x32, w, torch.randn_like(x32), bias=torch.randn(32))
    (only,) = [e for e in rec if e[0] == "triton"]
    assert "NSTG" not in only[3] and "FAST" not in only[3]  # 009's compensated loop
    rec.clear()
    x = torch.randn(2, 64, 32, dtype=torch.bfloat16)
    k17.conv_bwd(x, w, torch.randn_like(x))
    (only,) = [e for e in rec if e[0] == "triton"]
    assert "NSTG" in only[3] and "HAS_DHT" not in only[3]  # 015's dense loop
    assert k17._CASE_BWD == {}


@pytest.mark.parametrize(
    "bad",
    [
        dict(dy=torch.randn(2, 9, 4, dtype=torch.bfloat16)),
        dict(w=torch.randn(5, 4)),
        dict(initial_state=torch.randn(3, 4, 4, dtype=torch.bfloat16)),
        dict(dht=torch.randn(2, 4, 3, dtype=torch.bfloat16)),
        dict(activation="relu"),
        dict(cu_seqlens=torch.tensor([0, 3, 8], dtype=torch.int32)),
    ],
    ids=["dy", "w", "h0", "dht", "relu", "packed-B2"],
)
def test_bad_arguments_raise_016s_error_before_any_launch(rec, bad):
    a = dict(
        x=torch.randn(2, 8, 4, dtype=torch.bfloat16), w=torch.randn(4, 4),
        dy=torch.randn(2, 8, 4, dtype=torch.bfloat16), bias=torch.randn(4),
    )  # fmt: skip
    a.update(bad)
    with pytest.raises(Exception) as ours:
        k17.conv_bwd(**a)
    launched = [e for e in rec if e[0] == "triton"]
    with pytest.raises(Exception) as theirs:
        k16.conv_bwd(**a)
    assert type(ours.value) is type(theirs.value) and str(ours.value) == str(theirs.value)
    assert launched == []


def test_plans_and_launches_count_017s_table(rec):
    a = _inputs(*CASES[1])
    before = k17.plans()
    k17.conv_bwd(**a)
    k17.conv_bwd(**a)
    after = k17.plans()
    assert after["case_bwd_h0"] == before["case_bwd_h0"] + 1 and len(k16._CASE_BWD) == 0
    assert after["hits"] == before["hits"] + 1 and after["misses"] == before["misses"] + 1
    assert k17.launches()["case_bwd"][1] >= 1
