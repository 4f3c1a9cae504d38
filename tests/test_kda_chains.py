"""Whole kda chains (each idea's kda_fwd and kda_bwd: fla's stages with the idea's own in
their place) against fla 0.6.0's own chunk_kda forward and backward (idea 000), on Triton's
CPU interpreter, in fp32.

fla's chain runs there after `tests.interpreted.fla_on_the_interpreter()` (one configuration
per autotuned kernel, loop indices as tensors, no compiled-only paths). The inputs are fp32,
because Triton 3.6's interpreter computes bf16 tensor-core products wrongly
(tests/test_kda_wy.py); fp32 checks how the stages are wired together (shapes, layouts,
strides, the chain's order, packed sequences, states, GVA, both gate forms), and the GPU
bench checks the bf16 numbers against the fp64 oracle.

003 and earlier are not run here: 003 unwraps fla's kernels in a way the interpreter does
not support (and those ideas' records stand).

Runs in a subprocess (`tests.interpreted.run_interpreted`).
"""

from __future__ import annotations

import textwrap

import pytest

from tests.interpreted import run_interpreted

IDEAS = (
    "004",
    "005",
    "006",
    "007",
    "008",
    "009",
    "010",
    "011",
    "012",
    "013",
    "014",
    "015",
    "016",
    "017",
    "018",
    "019",
    "020",
    "021",
    "022",
    "023",
    "024",
    "026",
)

SCRIPT = textwrap.dedent(
    r"""
    import importlib, json, sys
    import torch
    import ladder  # the idea import finder
    import fla.ops.kda  # noqa: F401  (fla's kda chain, loaded before it is adjusted)
    from tests.interpreted import fla_on_the_interpreter, without_cuda_device

    fla_on_the_interpreter()

    without_cuda_device()  # the chains enter torch.cuda.device(q.device); there is none

    ideas = sys.argv[1].split(",")
    cases = [
        # name, B, H, HV, lengths (one per batch row, or packed), h0, final state, lower bound,
        # negative eigenvalues, shift of the raw gate input
        ("dense-ragged", 2, 1, 1, [100, 100], False, False, None, False, 0.0),
        ("gva", 1, 1, 2, [70], False, False, None, False, 0.0),
        ("varlen-state", 1, 1, 1, [1, 40, 2, 87], True, True, None, False, 0.0),
        ("lower-bound-neg", 1, 1, 1, [130], True, False, -5.0, True, 0.0),
        # softplus(g + dt_bias) about e^-14: gates of about -1e-6 nat per token, so exp(g_i -
        # g_j) is 1 to within fp32 rounding across a chunk (no decay at all)
        ("gate-near-0", 1, 1, 1, [96], True, True, None, False, -14.0),
    ]
    K = V = 32
    out = {}
    for name, B, H, HV, lens, has_h0, fs, lb, neg, g_shift in cases:
        torch.manual_seed(0)
        packed = B == 1 and len(lens) > 1
        T = sum(lens) if packed else lens[0]
        cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist()) if packed else None
        N = len(lens) if packed else B
        q = torch.randn(B, T, H, K)
        k = torch.randn(B, T, H, K)
        v = torch.randn(B, T, HV, V)
        g = torch.randn(B, T, HV, K) + g_shift
        beta = torch.randn(B, T, HV)
        A_log = torch.randn(HV) * 0.5
        dt_bias = torch.randn(HV * K) * 0.5
        h0 = torch.randn(N, HV, V, K) if has_h0 else None
        if name == "varlen-state":  # transposed storage: the chain reads what it saves
            h0 = h0.transpose(-1, -2).contiguous().transpose(-1, -2)
        do = torch.randn(B, T, HV, V)
        dht = torch.randn(N, HV, V, K) if fs else None
        res = {}
        for idea in ["000", *ideas]:
            m = importlib.import_module(f"ladder.kernels.kda.ideas.i{idea}.kernel")
            o, ht, ctx = m.kda_fwd(q, k, v, g, beta, A_log, dt_bias, K ** -0.5, h0, fs, cu, lb,
                                   lb is not None, neg)
            grads = m.kda_bwd(ctx, do, dht)
            res[idea] = [o, ht, *grads]
        names = ["o", "ht", "dq", "dk", "dv", "dg", "dbeta", "dA_log", "ddt_bias", "dh0"]
        out[name] = {}
        for idea in ideas:
            errs = {}
            for nm, a, b in zip(names, res[idea], res["000"]):
                if b is None:
                    assert a is None, (name, idea, nm)
                    continue
                assert a.shape == b.shape, (name, idea, nm, a.shape, b.shape)
                assert bool(torch.isfinite(a).all()) and float(b.norm()) > 0, (name, idea, nm)
                errs[nm] = float((a.double() - b.double()).norm() / b.double().norm())
            out[name][idea] = errs
    print(json.dumps(out))
    """
)


@pytest.mark.slow
def test_kda_chains_match_flas_own_in_the_interpreter() -> None:
    out = run_interpreted(SCRIPT, ",".join(IDEAS))
    assert set(out) == {"dense-ragged", "gva", "varlen-state", "lower-bound-neg", "gate-near-0"}
    for case, per_idea in out.items():
        assert set(per_idea) == set(IDEAS)
        for idea, errs in per_idea.items():
            want = {"o", "dq", "dk", "dv", "dg", "dbeta", "dA_log", "ddt_bias"}
            if case in ("varlen-state", "gate-near-0"):
                want |= {"ht", "dh0"}
            if case == "lower-bound-neg":
                want |= {"dh0"}
            assert set(errs) == want, (case, idea, sorted(errs))
            for name, err in errs.items():
                # fp32 throughout: the same math as fla's chain up to summation order
                assert err < 1e-4, (case, idea, name, err)
