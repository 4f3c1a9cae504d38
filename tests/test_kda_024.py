"""kda/024 (fixed-launch) on Triton's CPU interpreter: its chain launches none of fla's kernels
through fla's autotuner (kda/022's chain launches seven), and computes what kda/022's does.

The autotuned launches are counted by wrapping every fla autotuner's ``run``; the same count
on kda/022's chain shows what the wrapping sees. Outputs are compared with kda/022's at fp32
(the interpreter's bf16 products are wrong, tests/test_kda_wy.py); the GPU bench checks bf16
against the fp64 oracle. Runs in a subprocess (`tests.interpreted.run_interpreted`).
"""

from __future__ import annotations

import textwrap

import pytest

from tests.interpreted import run_interpreted

SCRIPT = textwrap.dedent(
    r"""
    import collections, importlib, json
    import torch
    import ladder  # the idea import finder
    import fla.ops.kda  # noqa: F401
    from tests.interpreted import (count_launches, fla_on_the_interpreter, kda_chain_inputs,
                                   without_cuda_device)

    fla_on_the_interpreter()
    without_cuda_device()

    calls = collections.Counter()
    count_launches(calls)

    cases = [
        # name, B, H, HV, lengths, h0 and final state, lower bound (safe gate)
        ("dense", 2, 1, 1, [100, 100], False, None),
        ("gva", 1, 1, 2, [70], False, None),
        ("varlen-state", 1, 1, 1, [1, 40, 2, 87], True, None),
        ("lower-bound", 1, 1, 1, [130], True, -5.0),
    ]
    K = V = 32
    out = {}
    for name, B, H, HV, lens, st, lb in cases:
        args, do, dht = kda_chain_inputs(B, H, HV, lens, K, V, st, lb)
        res, tuned = {}, {}
        for idea in ("022", "024"):
            m = importlib.import_module(f"ladder.kernels.kda.ideas.i{idea}.kernel")
            calls.clear()
            o, ht, ctx = m.kda_fwd(*args)
            grads = m.kda_bwd(ctx, do, dht)
            tuned[idea] = dict(calls)
            res[idea] = [o, ht, *grads]
        same = [a is None and b is None or (a is not None and b is not None and bool(torch.equal(a, b)))
                for a, b in zip(res["022"], res["024"])]
        err = max(float((a.double() - b.double()).norm() / b.double().norm())
                  for a, b in zip(res["024"], res["022"]) if b is not None)
        out[name] = {"tuned": tuned, "equal": all(same), "err": err}
    print(json.dumps(out))
    """
)

# kda/022's chain's autotuned launches per forward+backward at these K, V (and T's NB bucket)
FLA_AUTOTUNED_IN_022 = {
    "l2norm_fwd_kernel": 2,
    "l2norm_bwd_kernel": 2,
    "kda_gate_chunk_cumsum_vector_kernel": 2,
    "chunk_kda_fwd_kernel_inter_solve_fused": 1,
    "recompute_w_u_fwd_kda_kernel": 2,
    "chunk_kda_bwd_kernel_dAv": 1,
    "chunk_gated_delta_rule_fwd_kernel_h_blockdim64": 1,
}

# fla's forward intra-chunk stage for the bounded gate (``safe_gate``): sub-chunk kernel, solve
# and the forward's w/u, all autotuned, in kda/022's chain and in kda/024's
SAFE_GATE_INTRA = {
    "lower-bound": {
        "chunk_kda_fwd_kernel_intra_sub_chunk": 1,
        "chunk_kda_fwd_kernel_inter_solve_fused": 1,
        "recompute_w_u_fwd_kda_kernel": 1,
    }
}


@pytest.mark.slow
def test_024_autotunes_nothing_and_computes_022s_chain() -> None:
    out = run_interpreted(SCRIPT)
    assert set(out) == {"dense", "gva", "varlen-state", "lower-bound"}
    for case, r in out.items():
        # the same kernels on the same operands. On the interpreter kda/022's chain runs the
        # first configuration of each of fla's autotune lists and kda/024's its fixed pick, so
        # their tiles (and the order of fp32 sums, numpy's matmul per tile) may differ: equal
        # bit for bit on some CPUs, within fp32 rounding on others (OpenBLAS picks its kernels
        # by CPU). A wrong operand or stage would be off by far more than 1e-6.
        assert r["err"] <= 1e-6, (case, r["err"])
        want_022 = dict(FLA_AUTOTUNED_IN_022)
        if case in SAFE_GATE_INTRA:  # fla's stage takes the place of the diagonal kernel's
            want_022["chunk_kda_fwd_kernel_intra_sub_chunk"] = 1
        assert r["tuned"]["022"] == want_022, (case, r["tuned"]["022"])
        # the bounded gate's forward intra stage stays fla's (autotuned) in both chains
        assert r["tuned"]["024"] == SAFE_GATE_INTRA.get(case, {}), (case, r["tuned"]["024"])


def test_024s_default_launches_are_flas_prod_picks() -> None:
    """launch.py's knob defaults are the configurations fla's autotuner picked at prod on the
    H200 (docs/results/kda-fla-picks-h200-20261205.json), as its docstring's table says."""
    import json
    import os
    from pathlib import Path

    import ladder  # noqa: F401  (the idea import finder)

    assert not [
        k
        for k in os.environ
        if k.startswith(("KDA_L2", "KDA_GCS", "KDA_SOLVE", "KDA_WU", "KDA_DAV", "KDA_FH"))
    ]
    from ladder.kernels.kda.ideas.i024 import launch

    root = Path(__file__).resolve().parents[1]
    picks = json.loads((root / "docs/results/kda-fla-picks-h200-20261205.json").read_text())[
        "kernels"
    ]

    def pick(name: str, n_tensor_dtypes: int | None = None) -> dict:
        (entry,) = [
            e
            for e in picks[name]
            if n_tensor_dtypes is None
            or sum(str(x).startswith("torch.") for x in e["key"]) == n_tensor_dtypes
        ]
        return entry["pick"]

    assert pick("l2norm_fwd_kernel") == {
        "BT": launch.L2F_BT,
        "num_warps": launch.L2F_WARPS,
        "num_stages": launch.L2F_STAGES,
    }
    assert pick("l2norm_bwd_kernel") == {
        "BT": launch.L2B_BT,
        "num_warps": launch.L2B_WARPS,
        "num_stages": launch.L2B_STAGES,
    }
    assert pick("kda_gate_chunk_cumsum_vector_kernel") == {
        "BS": launch.GCS_BS,
        "num_warps": launch.GCS_WARPS,
        "num_stages": launch.GCS_STAGES,
    }
    assert pick("chunk_kda_fwd_kernel_inter_solve_fused") == {
        "BK": launch.SOLVE_BK,
        "num_warps": launch.SOLVE_WARPS,
        "num_stages": launch.SOLVE_STAGES,
    }
    # the w/u kernel's key carries each tensor argument's dtype: 8 without q (the forward),
    # 10 with q and qg (the backward's recompute)
    assert pick("recompute_w_u_fwd_kda_kernel", 8) == {
        "num_warps": launch.WUF_WARPS,
        "num_stages": launch.WUF_STAGES,
    }
    assert pick("recompute_w_u_fwd_kda_kernel", 10) == {
        "num_warps": launch.WUB_WARPS,
        "num_stages": launch.WUB_STAGES,
    }
    assert pick("chunk_kda_bwd_kernel_dAv") == {
        "num_warps": launch.DAV_WARPS,
        "num_stages": launch.DAV_STAGES,
    }
    assert pick("chunk_gated_delta_rule_fwd_kernel_h_blockdim64") == {
        "BV": launch.FH_BV,
        "num_warps": launch.FH_WARPS,
        "num_stages": launch.FH_STAGES,
    }


def test_flas_l2norm_kernels_never_read_nb() -> None:
    """launch.py passes NB = 1 whatever T is: safe only while fla's kernels take NB for their
    autotune key alone, their bodies never reading it."""
    import ast
    import textwrap

    from fla.modules.norm.l2norm import l2norm_bwd_kernel, l2norm_fwd_kernel
    from ladder.kernels.kda.ideas.i024 import launch

    import ladder  # noqa: F401

    assert launch.NB == 1
    for kernel in (l2norm_fwd_kernel, l2norm_bwd_kernel):
        fn = ast.parse(textwrap.dedent(launch.jit(kernel).src)).body[0]
        assert "NB" in [a.arg for a in fn.args.args]
        read = {n.id for stmt in fn.body for n in ast.walk(stmt) if isinstance(n, ast.Name)}
        assert "NB" not in read, kernel


def _bad_calls():
    import torch

    r = torch.randn
    B, T, H, HV, K, V, BT = 1, 64, 2, 4, 32, 32, 64
    k, v = r(B, T, H, K), r(B, T, HV, V)
    beta, A, gk = r(B, T, HV), r(B, T, HV, BT), r(B, T, HV, K)
    cu = torch.tensor([0, 32, 64])
    return [
        ("w_u", (k, v, r(B, T, 5), A, gk), {}, "beta must be [1, 64, 4], got [1, 64, 5]"),
        ("w_u", (k, v, r(B, T, HV, 1), A, gk), {}, "beta must be [1, 64, 4], got [1, 64, 4, 1]"),
        ("w_u", (k[0], v, beta, A, gk), {}, "k must be 4-D, got [64, 2, 32]"),
        ("w_u", (k, v[..., 0], beta, A, gk), {}, "v must be 4-D"),
        ("w_u", (k, v, beta, r(B, T, HV, 48), gk), {}, "a power of two >= 16, got 48"),
        ("w_u", (r(B, T, 3, K), v, beta, A, gk), {}, "HV 4 must be a multiple of the heads H 3"),
        ("w_u", (k.transpose(1, 2).contiguous().transpose(1, 2), v, beta, A, gk), {}, "k must be contiguous"),
        ("w_u", (r(2, T, H, K), r(2, T, HV, V), r(2, T, HV), r(2, T, HV, BT), r(2, T, HV, K)),
         {"cu_seqlens": cu}, "a packed batch (cu_seqlens given) has B == 1"),
        ("dav", (k, k, v, v, r(B, T, HV, 32), 0.1), {}, "A must be [1, 64, 4, 64], got [1, 64, 4, 32]"),
        ("dav", (k, k, v, v, r(B, T, 5, BT), 0.1), {}, "A must be [1, 64, 4, 64], got [1, 64, 5, 64]"),
        ("dav", (k, k, v, v, A, 0.1), {"chunk_size": 32}, "A must be [1, 64, 4, 32]"),
        ("dav", (k, k, v, v, A, 0.1), {"chunk_size": 0}, "chunk_size must be a power of two >= 16, got 0"),
        ("dav", (k, k, v, v, A, 0.1), {}, None),  # valid: past the checks, to Triton
        ("dav", (k, k, v, v.transpose(2, 3).contiguous().transpose(2, 3), A, 0.1), {},
         "do must be contiguous"),
        ("gate_cumsum", (gk, r(5), r(HV * K), 1.0, BT), {}, "A_log must be a contiguous tensor of 4 elements, got [5]"),
        ("gate_cumsum", (gk, r(HV), r(7), 1.0, BT), {}, "dt_bias must be a contiguous tensor of 128 elements, got [7]"),
        ("l2norm_fwd", (torch.tensor(1.0),), {}, "x must be [..., D] with D >= 1, got []"),
        ("l2norm_fwd", (r(4, 0),), {}, "x must be [..., D] with D >= 1, got [4, 0]"),
        ("l2norm_bwd", (r(4, 8), r(4).bfloat16(), r(4, 8)), {}, "rstd must be fp32"),
    ]  # fmt: skip


@pytest.mark.parametrize("case", range(len(_bad_calls())))
def test_024s_launches_refuse_bad_shapes_before_launching(case: int) -> None:
    """Each of launch.py's checks raises its ValueError on the CPU, before Triton is reached
    (a call that passed them would stop at Triton's "0 active drivers" here)."""
    from ladder.kernels.kda.ideas.i024 import launch

    import ladder  # noqa: F401

    name, args, kwargs, needle = _bad_calls()[case]
    if needle is None:  # a contiguous view of the same shape passes the checks: Triton's turn
        with pytest.raises(Exception) as info:
            getattr(launch, name)(*args, **kwargs)
        assert not isinstance(info.value, ValueError) or "must" not in str(info.value), info.value
        return
    with pytest.raises(ValueError) as info:
        getattr(launch, name)(*args, **kwargs)
    assert needle in str(info.value), info.value
