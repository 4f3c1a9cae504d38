"""kda/027 (walk-wu) on Triton's CPU interpreter: its forward runs no w/u kernel (the state
walk forms w and u from the diagonal kernel's kb and kg), computes what kda/025's forward
computes, and leaves the backward kda/025's: the same saved tensors (the gate cumsum
included), one w/u launch in the backward's recompute, the same gradients.

Kernel launches are counted by wrapping each kernel's ``run``. fp32 inputs (the
interpreter's bf16 products are wrong, tests/test_kda_wy.py); the GPU test
(tests/test_kda_027_gpu.py) checks bf16 against kda/025 bit for bit and the bench against the
fp64 oracle. Runs in a subprocess (`tests.interpreted.run_interpreted`).
"""

from __future__ import annotations

import textwrap

import pytest

from tests import test_kda_024
from tests.interpreted import run_interpreted

SCRIPT = textwrap.dedent(
    r"""
    import collections, importlib, json
    import torch
    import ladder  # the idea import finder
    import fla.ops.kda  # noqa: F401
    from fla.ops.kda.wy_fast import recompute_w_u_fwd_kda_kernel
    from tests.interpreted import (count_launches, fla_on_the_interpreter, kda_chain_inputs,
                                   without_cuda_device)

    fla_on_the_interpreter()
    without_cuda_device()

    launch = importlib.import_module("ladder.kernels.kda.ideas.i024.launch")
    i22 = importlib.import_module("ladder.kernels.kda.ideas.i022.intra_fwd")
    i27 = importlib.import_module("ladder.kernels.kda.ideas.i027.intra_fwd")
    f19 = importlib.import_module("ladder.kernels.kda.ideas.i019.fwd")
    f27 = importlib.import_module("ladder.kernels.kda.ideas.i027.fwd")
    calls = collections.Counter()
    count_launches(calls, {"diag-022": i22.kda_fwd_diag_kernel,
                           "diag-027": i27.kda_fwd_diag_kernel,
                           "walk-019": f19.chunk_kda_fwd_kernel_h_o,
                           "walk-027": f27.chunk_kda_fwd_kernel_walk_wu,
                           "w_u": launch.jit(recompute_w_u_fwd_kda_kernel)})

    k25 = importlib.import_module("ladder.kernels.kda.ideas.i025.kernel")
    k27 = importlib.import_module("ladder.kernels.kda.ideas.i027.kernel")
    cases = [
        # name, B, H, HV, lengths, h0 and final state, lower bound (safe gate), deep gate
        ("dense", 2, 1, 1, [100, 100], False, None, False),
        ("gva", 1, 1, 2, [70], False, None, False),
        ("varlen-state", 1, 1, 1, [1, 40, 2, 87], True, None, False),
        ("lower-bound", 1, 1, 1, [130], True, -5.0, False),
        ("deep", 1, 1, 1, [130], True, None, True),
    ]
    K, V = 32, 48
    AQK_SLOT = 11  # fla's saved order: ..., A_log, dt_bias, Aqk, Akk, ...

    def same(i, a, b, lens):
        # saved tensor i equal in both chains: Aqk on each chunk's lower triangle only (no
        # kernel writes above it: fla's solve leaves that memory as allocated)
        if a is None or b is None:
            return a is None and b is None
        if a.shape != b.shape:
            return False
        if i == AQK_SLOT:
            local = torch.cat([torch.arange(n) % 64 for n in lens])  # row within its chunk
            local = local.repeat(a.shape[0] * a.shape[1] // local.numel())
            keep = torch.arange(64)[None, :] <= local[:, None]
            a = a.reshape(-1, a.shape[2], 64)[keep[:, None, :].expand(-1, a.shape[2], -1)]
            b = b.reshape(-1, b.shape[2], 64)[keep[:, None, :].expand(-1, b.shape[2], -1)]
        return bool(torch.equal(a, b))

    out = {}
    for name, B, H, HV, lens, st, lb, deep in cases:
        args, do, dht = kda_chain_inputs(B, H, HV, lens, K, V, st, lb)
        if deep:  # -exp(A_log) * softplus(g + dt_bias): about -16 nat (-23 log2 units) a token
            args = list(args)
            args[3] = args[3] + 2.0
            args[5] = torch.full_like(args[5], 2.0)
            args = tuple(args)
        res, fwd_calls, bwd_calls, saved = {}, {}, {}, {}
        for idea, m in (("025", k25), ("027", k27)):
            calls.clear()
            o, ht, ctx = m.kda_fwd(*args)
            fwd_calls[idea] = dict(calls)
            saved[idea] = [None if t is None else t.clone() for t in ctx.saved_tensors]
            calls.clear()
            grads = m.kda_bwd(ctx, do, dht)
            bwd_calls[idea] = dict(calls)
            res[idea] = [o, ht, *grads]
        def rel(a, b):
            return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))
        out[name] = {
            "fwd_calls": fwd_calls, "bwd_calls": bwd_calls,
            "err_o": rel(res["027"][0], res["025"][0]),
            "err_ht": None if res["025"][1] is None else rel(res["027"][1], res["025"][1]),
            "err_grads": max(rel(a, b) for a, b in zip(res["027"][2:], res["025"][2:])
                             if b is not None),
            "saved_same": [same(i, a, b, lens) for i, (a, b)
                           in enumerate(zip(saved["027"], saved["025"]))],
            "o_norm": float(res["027"][0].double().norm()),
            "finite": all(bool(torch.isfinite(t).all()) for t in res["027"] if t is not None),
        }
    print(json.dumps(out))
    """
)


@pytest.mark.slow
def test_027_folds_the_forward_wu_into_the_walk_and_computes_025s_chain() -> None:
    out = run_interpreted(SCRIPT)
    assert set(out) == {"dense", "gva", "varlen-state", "lower-bound", "deep"}
    for case, r in out.items():
        assert r["finite"], case
        assert r["o_norm"] > 0, case
        # the same operands and products as kda/025's forward: equal up to the order of
        # fp32 sums (the interpreter's products are numpy's); a wrong operand (beta or the
        # gate missing from kb, kg's last row) is off by far more. Roundings to bf16 are
        # no-ops in fp32: tests/test_kda_028.py's bf16 stage test sees those
        assert r["err_o"] <= 1e-5, (case, r["err_o"])
        if r["err_ht"] is not None:
            assert r["err_ht"] <= 1e-5, (case, r["err_ht"])
        assert r["err_grads"] <= 1e-5, (case, r["err_grads"])
        # the backward is kda/025's on what kda/025's forward saves (Aqk, Akk and the gate
        # cumsum from the same kernels' arithmetic)
        assert all(r["saved_same"]), (case, r["saved_same"])
        assert r["bwd_calls"]["027"] == r["bwd_calls"]["025"], (case, r["bwd_calls"])
        assert r["bwd_calls"]["027"].get("w_u") == 1, (case, r["bwd_calls"])
        if case == "lower-bound":  # fla's intra stage for the bounded gate: kda/025's forward
            assert r["fwd_calls"]["027"] == r["fwd_calls"]["025"], r["fwd_calls"]
            for name, n in test_kda_024.SAFE_GATE_INTRA["lower-bound"].items():
                assert r["fwd_calls"]["027"].get(name) == n, r["fwd_calls"]
        else:  # no w/u launch in the forward; one diagonal kernel and one walk, 027's
            want = {"diag-027": 1, "walk-027": 1}
            assert r["fwd_calls"]["027"] == want, (case, r["fwd_calls"]["027"])
            assert r["fwd_calls"]["025"] == {"diag-022": 1, "walk-019": 1, "w_u": 1}, (
                case, r["fwd_calls"]["025"])  # fmt: skip
