"""kda ideas 009's and 010's one-pass gate tails (`gate.gate_tail`) against the two fla 0.6.0
kernels they replace (`chunk_local_cumsum(..., reverse=True)`, then `kda_gate_bwd`), on
Triton's CPU interpreter, and against a float64 evaluation of the same formulas.

Cases: T not a multiple of the chunk, K not a power of two, two value heads, both gate forms
(softplus and lower bound), the raw gate in fp32 and bf16, packed sequences of 1 to 70
tokens, and a packed batch whose sequences end before T (those rows: 0 here; fla leaves them
to whatever its cumsum's uninitialised buffer held, so they are left out of the comparison
with fla and of its sums). Raw gates reach +-40 (softplus's linear branch and sigmoid's
saturation). Outputs allocated uninitialised start as NaN, so a row no kernel writes shows.
010 also takes strided cu_seqlens / chunk_indices and keeps a NaN gate input NaN in dA_log
(009's faults when called on its own, its NOTES.md).

Runs in a subprocess (`tests.interpreted.run_interpreted`).
"""

from __future__ import annotations

import textwrap

import pytest

from tests.interpreted import run_interpreted

SCRIPT = textwrap.dedent(
    r"""
    import importlib, json, sys
    import torch
    import ladder  # the idea import finder
    import fla.ops.kda.gate, fla.ops.utils.cumsum  # noqa: F401 (adjusted below)
    from tests.interpreted import fla_on_the_interpreter

    fla_on_the_interpreter()
    _empty_like = torch.empty_like
    torch.empty_like = lambda t, **kw: _empty_like(t, **kw).fill_(float("nan"))
    from fla.ops.kda.gate import kda_gate_bwd
    from fla.ops.utils import chunk_local_cumsum
    from fla.ops.utils.index import prepare_chunk_indices
    gate = importlib.import_module(f"ladder.kernels.kda.ideas.i{sys.argv[1]}.gate")

    def oracle(dgc, g, A_log, dt_bias, lb, cu, T):
        # float64: reverse cumsum within each 64-row chunk of each sequence, then the gate
        B, _, HV, K = g.shape
        dgc, x = dgc.double(), g.double() + dt_bias.double().view(HV, K)
        bounds = [(b, 0, T) for b in range(B)] if cu is None else [
            (0, int(cu[i]), int(cu[i + 1])) for i in range(len(cu) - 1)]
        dyg = torch.zeros_like(dgc)
        for b, s, e in bounds:
            for c in range(s, e, 64):
                blk = dgc[b, c:min(c + 64, e)]
                dyg[b, c:min(c + 64, e)] = blk.flip(0).cumsum(0).flip(0)
        a = A_log.double().view(1, 1, HV, 1)
        if lb is None:
            dx = -a.exp() * torch.sigmoid(x) * dyg
            dA = (dyg * -a.exp() * torch.nn.functional.softplus(x)).sum((0, 1, 3))
        else:
            s = torch.sigmoid(a.exp() * x)
            dx = dyg * lb * s * (1 - s) * a.exp()
            dA = (dx * x).sum((0, 1, 3))
        covered = torch.zeros(B, T, dtype=torch.bool)
        for b, s, e in bounds:
            covered[b, s:e] = True
        dx = torch.where(covered[:, :, None, None], dx, 0.0)
        return dx, dA, dx.sum((0, 1)).reshape(-1), covered

    def rel(a, b):
        return float((a.double() - b.double()).norm() / b.double().norm())

    cases = [
        # name, B, HV, K, lengths (one per batch row, or packed; None: rows past the last), lb,
        # gate dtype
        ("dense-ragged", 2, 1, 32, [100, 100], None, torch.float32),
        ("k-ragged-two-heads", 1, 2, 24, [130], None, torch.float32),
        ("lower-bound", 2, 2, 32, [70, 70], -5.0, torch.float32),
        ("bf16-gate", 1, 1, 32, [129], None, torch.bfloat16),
        ("varlen", 1, 2, 32, [1, 40, 2, 70, 64], None, torch.float32),
        ("varlen-lower-bound", 1, 1, 16, [3, 65, 1], -5.0, torch.float32),
        ("packed-short-of-t", 1, 1, 32, [30, 41, None], None, torch.float32),
    ]
    out = {}
    for name, B, HV, K, lens, lb, gdt in cases:
        torch.manual_seed(0)
        pad = 9 if lens[-1] is None else 0
        lens = [n for n in lens if n is not None]
        packed = B == 1 and len(lens) > 1
        T = (sum(lens) if packed else lens[0]) + pad
        cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist()) if packed else None
        ci = prepare_chunk_indices(cu, 64) if packed else None
        dgc = torch.randn(B, T, HV, K)
        g = (torch.randn(B, T, HV, K) * 10).clamp(-40, 40).to(gdt)
        A_log = torch.randn(HV) * 0.5
        dt_bias = torch.randn(HV * K) * 0.5
        dg, dA, db = gate.gate_tail(dgc, g, A_log, dt_bias, lower_bound=lb, cu_seqlens=cu,
                                    chunk_indices=ci)
        dyg = chunk_local_cumsum(dgc, chunk_size=64, reverse=True, cu_seqlens=cu,
                                 chunk_indices=ci)
        if packed:
            dyg[:, sum(lens):] = 0.0  # fla's cumsum leaves them unset
        f_dg, f_dA, f_db = kda_gate_bwd(g=g, A_log=A_log, dt_bias=dt_bias, dyg=dyg,
                                        lower_bound=lb)
        o_dg, o_dA, o_db, cov = oracle(dgc, g, A_log, dt_bias, lb, cu, T)
        res = {"dtypes": [str(dg.dtype), str(dA.dtype), str(db.dtype)],
               "finite": bool(torch.isfinite(dg).all()),
               "uncovered_zero": bool((dg[~cov] == 0).all()), "n_uncovered": int((~cov).sum())}
        for nm, a, f, o in (("dg", dg, f_dg, o_dg), ("dA", dA, f_dA, o_dA), ("db", db, f_db, o_db)):
            res[nm] = {"vs_fla": rel(a, f), "vs_oracle": rel(a, o), "fla_vs_oracle": rel(f, o)}
        out[name] = res
    print(json.dumps(out))
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("idea", ["009", "010"])
def test_gate_tail_matches_flas_two_kernels_and_the_oracle(idea: str) -> None:
    out = run_interpreted(SCRIPT, idea)
    assert len(out) == 7
    for case, res in out.items():
        gdt = "torch.bfloat16" if case == "bf16-gate" else "torch.float32"
        assert res["dtypes"] == [gdt, "torch.float32", "torch.float32"], (case, res["dtypes"])
        assert res["finite"] and res["uncovered_zero"], (case, res)
        assert res["n_uncovered"] == (9 if case == "packed-short-of-t" else 0), case
        for nm in ("dg", "dA", "db"):
            errs = res[nm]
            # the same formulas in fp32 as fla's, up to the order of the partial sums (and
            # softplus's rounding); bf16 dg: both round the same fp32 value, up to one ulp
            tol = 1e-3 if (nm == "dg" and gdt == "torch.bfloat16") else 1e-5
            assert errs["vs_fla"] < tol, (case, nm, errs)
            assert errs["vs_oracle"] <= max(2 * errs["fla_vs_oracle"], 1e-6), (case, nm, errs)


@pytest.mark.parametrize("idea", ["009", "010"])
def test_gate_tail_refuses_bad_shapes_before_any_launch(idea: str) -> None:
    import importlib

    import torch

    gate = importlib.import_module(f"ladder.kernels.kda.ideas.i{idea}.gate")

    g = torch.zeros(1, 8, 2, 4)
    a, b = torch.zeros(2), torch.zeros(8)
    cu = torch.tensor([0, 8])
    with pytest.raises(ValueError, match="same"):
        gate.gate_tail(torch.zeros(1, 8, 2, 5), g, a, b)
    with pytest.raises(ValueError, match="A_log must have 2"):
        gate.gate_tail(g, g, torch.zeros(3), b)
    with pytest.raises(ValueError, match="both cu_seqlens and chunk_indices"):
        gate.gate_tail(g, g, a, b, cu_seqlens=cu)
    with pytest.raises(ValueError, match="B == 1"):
        gate.gate_tail(
            torch.zeros(2, 8, 2, 4),
            torch.zeros(2, 8, 2, 4),
            a,
            b,
            cu_seqlens=cu,
            chunk_indices=torch.zeros(1, 2, dtype=torch.long),
        )
    gate.BK = 24  # the knob's value as the environment would set it
    try:
        with pytest.raises(ValueError, match="KDA_GATE_TAIL_BK 24 must be a power of two"):
            gate.gate_tail(g, g, a, b)
    finally:
        gate.BK = 32


def test_010_refuses_the_index_shapes_009_let_through() -> None:
    import torch
    from ladder.kernels.kda.ideas.i010 import gate

    g = torch.zeros(1, 70, 2, 8)
    a, b = torch.zeros(2), torch.zeros(16)
    cu = torch.tensor([0, 30, 70])
    ci = torch.tensor([[0, 0], [1, 0]])
    with pytest.raises(ValueError, match=r"chunk_indices \[NT, 2\], got \[2\] and \[2, 3\]"):
        gate.gate_tail(g, g, a, b, cu_seqlens=cu[:2], chunk_indices=torch.zeros(2, 3).long())
    with pytest.raises(ValueError, match="cu_seqlens must be"):
        gate.gate_tail(g, g, a, b, cu_seqlens=cu, chunk_indices=ci.flatten())
    with pytest.raises(ValueError, match="cu_seqlens must be"):
        gate.gate_tail(g, g, a, b, cu_seqlens=cu[None], chunk_indices=ci)
    with pytest.raises(ValueError, match="chunk_size 48 must be a power of two"):
        gate.gate_tail(g, g, a, b, chunk_size=48)


FIXES_SCRIPT = textwrap.dedent(
    r"""
    import json
    import torch
    from tests.interpreted import compiled_min_semantics, fla_on_the_interpreter

    compiled_min_semantics()  # compiled tl.minimum without propagate_nan drops a NaN
    import ladder  # the idea import finder
    import fla.ops.kda.gate, fla.ops.utils.cumsum  # noqa: F401 (adjusted below)

    fla_on_the_interpreter()
    from fla.ops.kda.gate import kda_gate_bwd
    from fla.ops.utils import chunk_local_cumsum
    from fla.ops.utils.index import prepare_chunk_indices
    from ladder.kernels.kda.ideas.i010 import gate

    torch.manual_seed(0)
    cu = torch.tensor([0, 3, 68, 69, 109, 209])
    T, HV, K = 209, 2, 24
    ci = prepare_chunk_indices(cu, 64)
    d, g = torch.randn(1, T, HV, K), torch.randn(1, T, HV, K) * 5
    A, b = torch.randn(HV) * 0.5, torch.randn(HV * K) * 0.5
    ref = kda_gate_bwd(g=g, A_log=A, dt_bias=b,
                       dyg=chunk_local_cumsum(d, 64, reverse=True, cu_seqlens=cu, chunk_indices=ci))
    plain = gate.gate_tail(d, g, A, b, cu_seqlens=cu, chunk_indices=ci)
    views = gate.gate_tail(d, g, A, b, cu_seqlens=torch.stack([cu, cu], 1)[:, 0],
                           chunk_indices=ci.t().contiguous().t())
    out = {
        "views_strided": [not torch.stack([cu, cu], 1)[:, 0].is_contiguous(),
                          not ci.t().contiguous().t().is_contiguous()],
        "views_equal": [bool(torch.equal(x, y)) for x, y in zip(plain, views)],
        "vs_fla": [float((x - r).norm() / r.norm()) for x, r in zip(views, ref)],
    }
    g2 = g[:, :64].clone()
    g2[0, 10, 0, 3] = float("nan")
    d2 = d[:, :64].clone()  # finite: the NaN enters through the gate input alone
    ours = gate.gate_tail(d2, g2, A, b)
    fla = kda_gate_bwd(g=g2, A_log=A, dt_bias=b, dyg=chunk_local_cumsum(d2, 64, reverse=True))
    out["nan"] = [[torch.isnan(x).flatten().tolist() for x in ours],
                  [torch.isnan(x).flatten().tolist() for x in fla]]
    print(json.dumps(out))
    """
)


@pytest.mark.slow
def test_010_reads_strided_offsets_and_keeps_a_nan_gate_nan() -> None:
    """009's faults when called on its own (its NOTES.md): strided cu_seqlens /
    chunk_indices read at plain offsets, and a NaN gate input dropped by compiled
    tl.minimum so that dA_log came out finite. 010 gives fla's numbers and NaN pattern."""
    out = run_interpreted(FIXES_SCRIPT)
    assert out["views_strided"] == [True, True]
    assert out["views_equal"] == [True, True, True]
    assert max(out["vs_fla"]) < 1e-5, out["vs_fla"]
    ours, fla = out["nan"]
    assert fla[1] == [True, False], "fla's dA_log: NaN for the head with the NaN gate"
    assert ours == fla


CHAIN_NAN_SCRIPT = textwrap.dedent(
    r"""
    import importlib, json
    import torch
    from tests.interpreted import (
        compiled_min_semantics, fla_on_the_interpreter, without_cuda_device,
    )

    compiled_min_semantics()  # as the GPU runs tl.minimum (the interpreter keeps a NaN)
    import ladder  # the idea import finder
    import fla.ops.kda  # noqa: F401

    fla_on_the_interpreter()
    without_cuda_device()
    torch.manual_seed(0)
    B, T, H, HV, K, V = 1, 130, 1, 1, 32, 32
    q, k = torch.randn(B, T, H, K), torch.randn(B, T, H, K)
    v, do = torch.randn(B, T, HV, V), torch.randn(B, T, HV, V)
    g = torch.randn(B, T, HV, K)
    g[0, 70, 0, 3] = float("nan")  # one NaN in the raw gate input, mid-chunk
    beta, A_log, dt_bias = torch.randn(B, T, HV), torch.randn(HV) * 0.5, torch.randn(HV * K) * 0.5
    names = ["o", "dq", "dk", "dv", "dg", "dbeta", "dA_log", "ddt_bias"]
    out = {}
    for idea in ("000", "009", "010"):
        m = importlib.import_module(f"ladder.kernels.kda.ideas.i{idea}.kernel")
        o, _, ctx = m.kda_fwd(q, k, v, g, beta, A_log, dt_bias, K ** -0.5, None, False, None,
                              None, False, False)
        dq, dk, dv, dg, db, dA, dbias, _ = m.kda_bwd(ctx, do, None)
        out[idea] = {n: torch.isnan(t).flatten().tolist()
                     for n, t in zip(names, (o, dq, dk, dv, dg, db, dA, dbias))}
    print(json.dumps(out))
    """
)


@pytest.mark.slow
def test_a_nan_in_the_raw_gate_gives_flas_nan_pattern_through_the_chain() -> None:
    """Called alone, gate_tail's softplus turns a NaN gate input into a finite value (compiled
    tl.minimum drops the NaN), so a NaN x with a finite dgc adds a finite term to dA_log where
    fla's gives NaN (NOTES.md). Through the chain a NaN in the gate input always reaches dgc
    too, so every output's NaN pattern is fla's: this checks that, element by element."""
    out = run_interpreted(CHAIN_NAN_SCRIPT)
    for name, mask in out["000"].items():
        assert any(mask), (name, "fla's output should carry the NaN")
        assert out["009"][name] == mask == out["010"][name], name
