"""kda/026 (segments-fixed) on Triton's CPU interpreter: its chain is kda/025's with kda/023's
forward intra-chunk stage at kda/024's fixed launches. So it launches kda/023's diagonal
kernel (never kda/022's), autotunes none of fla's kernels outside the bounded gate, runs the
gate stage once per forward+backward (kda/025's saved cumsum), and computes what kda/023's
chain computes, on gates deep enough that most rows of a sub-chunk leave the first anchor's
range too.

Kernel launches are counted by wrapping each kernel's ``run``, fla's autotuners' ``run`` for
the tuned launches. fp32 inputs (the interpreter's bf16 products are wrong,
tests/test_kda_wy.py); the GPU bench checks bf16 against the fp64 oracle. Runs in a subprocess
(`tests.interpreted.run_interpreted`).
"""

from __future__ import annotations

import textwrap

import pytest

from tests import test_kda_024
from tests.interpreted import run_interpreted

SCRIPT = textwrap.dedent(
    r"""
    import collections, dataclasses, importlib, json
    import torch
    import ladder  # the idea import finder
    import fla.ops.kda  # noqa: F401
    from tests.interpreted import (count_launches, fla_on_the_interpreter, kda_chain_inputs,
                                   without_cuda_device)

    fla_on_the_interpreter()
    without_cuda_device()

    i22 = importlib.import_module("ladder.kernels.kda.ideas.i022.intra_fwd")
    i23 = importlib.import_module("ladder.kernels.kda.ideas.i023.intra_fwd")
    calls = collections.Counter()
    count_launches(calls, {"diag-022": i22.kda_fwd_diag_kernel,
                           "diag-023": i23.kda_fwd_diag_kernel})

    k23 = importlib.import_module("ladder.kernels.kda.ideas.i023.kernel")
    k25 = importlib.import_module("ladder.kernels.kda.ideas.i025.kernel")
    k26 = importlib.import_module("ladder.kernels.kda.ideas.i026.kernel")
    cases = [
        # name, B, H, HV, lengths, h0 and final state, lower bound (safe gate), deep gate
        ("dense", 2, 1, 1, [100, 100], False, None, False),
        ("gva", 1, 1, 2, [70], False, None, False),
        ("varlen-state", 1, 1, 1, [1, 40, 2, 87], True, None, False),
        ("lower-bound", 1, 1, 1, [130], True, -5.0, False),
        ("deep", 1, 1, 1, [130], True, None, True),
    ]
    K = V = 32
    out = {}
    for name, B, H, HV, lens, st, lb, deep in cases:
        args, do, dht = kda_chain_inputs(B, H, HV, lens, K, V, st, lb)
        gc_depth = None
        if deep:  # -exp(A_log) * softplus(g + dt_bias): about -16 nat (-23 log2 units) a token
            args = list(args)
            args[3] = args[3] + 2.0
            args[5] = torch.full_like(args[5], 2.0)
            args = tuple(args)
        res, launched, gc_saved = {}, {}, {}
        for idea, m in (("023", k23), ("025", k25), ("026", k26)):
            calls.clear()
            o, ht, ctx = m.kda_fwd(*args)
            grads = m.kda_bwd(ctx, do, dht)
            launched[idea] = dict(calls)
            gc_saved[idea] = bool(getattr(ctx, "gc_saved", False))
            res[idea] = [o, ht, *grads]
        if deep:  # the chain's own gate cumsum (log2 units): how far a sub-chunk's rows fall
            gc = k26.STAGES.gate_cumsum(args[3], args[5], args[6], 1.4426950408889634, 64,
                                        None, None, None)
            T = gc.shape[1]
            a0 = torch.arange(T) // 16 * 16
            gc_depth = float(((gc[0, :, 0] - gc[0, a0, 0]).abs().amax(-1) > 112.0).float().mean())
        def err(x, y):
            return max(float((a.double() - b.double()).norm() / b.double().norm())
                       for a, b in zip(res[x], res[y]) if b is not None)
        out[name] = {"launched": launched, "gc_saved": gc_saved, "err_023": err("026", "023"),
                     "err_025": err("026", "025"), "past_range": gc_depth,
                     "finite": all(bool(torch.isfinite(t).all()) for t in res["026"] if t is not None),
                     "stages_same_but_intra": [f.name for f in dataclasses.fields(k26.STAGES)
                                               if getattr(k26.STAGES, f.name) is not getattr(k25.STAGES, f.name)]}
    print(json.dumps(out))
    """
)

# fla's forward intra-chunk stage for the bounded gate (``safe_gate``), autotuned in kda/024's
# chain and so in kda/025's and kda/026's
SAFE_GATE_INTRA = test_kda_024.SAFE_GATE_INTRA["lower-bound"]


@pytest.mark.slow
def test_026_runs_023s_diagonal_kernel_at_fixed_launches_and_computes_023s_chain() -> None:
    out = run_interpreted(SCRIPT)
    assert set(out) == {"dense", "gva", "varlen-state", "lower-bound", "deep"}
    for case, r in out.items():
        assert r["stages_same_but_intra"] == ["intra_fwd"], r["stages_same_but_intra"]
        assert r["finite"], case
        # kda/023's kernels on the same operands, fla's solve and w/u at a fixed configuration
        # where kda/023's chain takes the first of fla's autotune list on the interpreter: the
        # same up to the order of fp32 sums (tests/test_kda_024.py says why); a wrong operand or
        # stage would be off by far more
        assert r["err_023"] <= 1e-6, (case, r["err_023"])
        # kda/025's chain: another diagonal kernel, the same math (fp32 rounding apart)
        assert r["err_025"] <= 1e-5, (case, r["err_025"])
        assert r["gc_saved"] == {"023": False, "025": True, "026": True}, (case, r["gc_saved"])
        if case == "lower-bound":  # fla's intra stage for the bounded gate in both
            assert r["launched"]["026"] == SAFE_GATE_INTRA, r["launched"]["026"]
            assert r["launched"]["025"] == SAFE_GATE_INTRA, r["launched"]["025"]
        else:  # one diagonal launch per forward, kda/023's; kda/025 runs kda/022's
            assert r["launched"]["026"] == {"diag-023": 1}, (case, r["launched"]["026"])
            assert r["launched"]["025"] == {"diag-022": 1}, (case, r["launched"]["025"])
            assert r["launched"]["023"]["diag-023"] == 1, (case, r["launched"]["023"])
    # the deep case reaches the further anchored passes: most rows past the first range
    assert out["deep"]["past_range"] > 0.5, out["deep"]
