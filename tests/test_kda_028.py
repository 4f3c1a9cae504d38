"""kda/028 (bwd-walk-wu) on Triton's CPU interpreter: its backward recomputes w, qg, kg, h and
v_new with its row-wise kernel and walk (no fla w/u or state-recompute launch) and computes
kda/025's gradients; its forward is kda/027's. The bounded gate's forward is kda/025's (fla's
intra stage) and its backward takes the walk too.

Kernel launches are counted by wrapping each kernel's ``run``. fp32 inputs (the
interpreter's bf16 products are wrong, tests/test_kda_wy.py); the GPU test
(tests/test_kda_028_gpu.py) checks bf16 against kda/025 bit for bit and the bench against the
fp64 oracle. Runs in a subprocess (`tests.interpreted.run_interpreted`).
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
    from fla.ops.common.chunk_delta_h import chunk_gated_delta_rule_fwd_kernel_h_blockdim64
    from fla.ops.kda.wy_fast import recompute_w_u_fwd_kda_kernel
    from tests.interpreted import (count_launches, fla_on_the_interpreter, kda_chain_inputs,
                                   without_cuda_device)

    fla_on_the_interpreter()
    without_cuda_device()

    launch = importlib.import_module("ladder.kernels.kda.ideas.i024.launch")
    r28 = importlib.import_module("ladder.kernels.kda.ideas.i028.recompute")
    calls = collections.Counter()
    count_launches(calls, {"qkg-028": r28.kda_bwd_qkg_kernel,
                           "walk-028": r28.kda_bwd_walk_kernel,
                           "w_u": launch.jit(recompute_w_u_fwd_kda_kernel),
                           "fwd_h": launch.jit(chunk_gated_delta_rule_fwd_kernel_h_blockdim64)})

    k25 = importlib.import_module("ladder.kernels.kda.ideas.i025.kernel")
    k27 = importlib.import_module("ladder.kernels.kda.ideas.i027.kernel")
    k28 = importlib.import_module("ladder.kernels.kda.ideas.i028.kernel")
    cases = [
        # name, B, H, HV, lengths, h0 and final state, lower bound (safe gate), deep gate
        ("dense", 2, 1, 1, [100, 100], False, None, False),
        ("gva", 1, 1, 2, [70], False, None, False),
        ("varlen-state", 1, 1, 1, [1, 40, 2, 87], True, None, False),
        ("lower-bound", 1, 1, 1, [130], True, -5.0, False),
        ("deep", 1, 1, 1, [130], True, None, True),
    ]
    K, V = 32, 48
    out = {}
    for name, B, H, HV, lens, st, lb, deep in cases:
        args, do, dht = kda_chain_inputs(B, H, HV, lens, K, V, st, lb)
        if deep:  # -exp(A_log) * softplus(g + dt_bias): about -16 nat (-23 log2 units) a token
            args = list(args)
            args[3] = args[3] + 2.0
            args[5] = torch.full_like(args[5], 2.0)
            args = tuple(args)
        res, fwd_calls, bwd_calls = {}, {}, {}
        for idea, m in (("025", k25), ("027", k27), ("028", k28)):
            calls.clear()
            o, ht, ctx = m.kda_fwd(*args)
            fwd_calls[idea] = dict(calls)
            calls.clear()
            grads = m.kda_bwd(ctx, do, dht)
            bwd_calls[idea] = dict(calls)
            res[idea] = [o, ht, *grads]
        def rel(a, b):
            return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))
        out[name] = {
            "fwd_calls": fwd_calls, "bwd_calls": bwd_calls,
            "fwd_same_as_027": all(bool(torch.equal(a, b)) for a, b in
                                   zip(res["028"][:2], res["027"][:2]) if b is not None),
            "err": max(rel(a, b) for a, b in zip(res["028"], res["025"]) if b is not None),
            "finite": all(bool(torch.isfinite(t).all()) for t in res["028"] if t is not None),
        }
    print(json.dumps(out))
    """
)


@pytest.mark.slow
def test_028_recomputes_the_states_with_its_walk_and_computes_025s_gradients() -> None:
    out = run_interpreted(SCRIPT)
    assert set(out) == {"dense", "gva", "varlen-state", "lower-bound", "deep"}
    for case, r in out.items():
        assert r["finite"], case
        assert r["fwd_same_as_027"], case  # kda/027's forward
        # fla's operands and products in fla's order: kda/025's gradients up to the order of
        # fp32 sums (the interpreter's products are numpy's); a wrong operand (beta or the
        # gate missing from kb, h stored after the update, the update accumulated in another
        # order by far more than that) is off by far more
        assert r["err"] <= 1e-5, (case, r["err"])
        # the recompute: one row-wise kernel and one walk, no fla w/u or state kernel
        assert r["bwd_calls"]["028"] == {"qkg-028": 1, "walk-028": 1}, (case, r["bwd_calls"])
        assert r["bwd_calls"]["025"] == {"w_u": 1, "fwd_h": 1}, (case, r["bwd_calls"])
        assert r["fwd_calls"]["028"] == r["fwd_calls"]["027"], (case, r["fwd_calls"])
