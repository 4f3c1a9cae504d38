"""kda idea 008's fused state pass and output (`fwd.fwd_h_o`) against fla 0.6.0's two kernels
it replaces (`chunk_gated_delta_rule_fwd_h`, then `chunk_gla_fwd_o_gk`), on Triton's CPU
interpreter in fp32 (the interpreter computes bf16 tensor-core products wrongly).

The cases cover what the kernel's indexing has to get right: T not a multiple of the chunk,
K of one 64-wide block and of two (the second ragged), V split over two BV blocks (the
second ragged), GVA (two value heads per q/k head, kg per value head or per q/k head),
packed sequences of 1 to 70 tokens with an initial and a final state, and a gate of about
-200 nat per chunk (every exponent of the kernel is at most 0, so nothing may overflow).
The full chain with this stage runs in tests/test_kda_chains.py; the bf16 numbers are the
GPU bench's.

Runs in a subprocess (`tests.interpreted.run_interpreted`).
"""

from __future__ import annotations

import textwrap

import pytest

from tests.interpreted import run_interpreted

SCRIPT = textwrap.dedent(
    r"""
    import json
    import torch
    import ladder  # the idea import finder
    import fla.ops.common.chunk_delta_h, fla.ops.gla.chunk  # noqa: F401 (adjusted below)
    from tests.interpreted import fla_on_the_interpreter

    fla_on_the_interpreter()
    from fla.ops.common.chunk_delta_h import chunk_gated_delta_rule_fwd_h
    from fla.ops.gla.chunk import chunk_gla_fwd_o_gk
    from ladder.kernels.kda.ideas.i008 import fwd

    cases = [
        # name, B, H, HK, HV, K, V, lengths (one per batch row, or packed), h0, final, gate scale
        ("dense-ragged-t", 2, 1, 1, 1, 32, 32, [100, 100], False, False, 1.0),
        ("two-k-blocks-two-v-blocks", 1, 1, 1, 1, 96, 80, [130], True, True, 1.0),
        ("gva-kg-per-value-head", 1, 1, 2, 2, 32, 32, [70], False, True, 1.0),
        ("gva-kg-per-qk-head", 1, 1, 1, 2, 32, 32, [70], True, False, 1.0),
        ("varlen-state", 1, 1, 1, 1, 32, 32, [1, 40, 2, 70, 64], True, True, 1.0),
        ("deep-gate", 1, 1, 1, 1, 32, 32, [150], True, True, 50.0),
    ]
    out = {}
    for name, B, H, HK, HV, K, V, lens, has_h0, fs, gscale in cases:
        torch.manual_seed(0)
        packed = B == 1 and len(lens) > 1
        T = sum(lens) if packed else lens[0]
        cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist()) if packed else None
        N = len(lens) if packed else B
        q = torch.nn.functional.normalize(torch.randn(B, T, H, K), dim=-1)
        kg = torch.randn(B, T, HK, K) * 0.3
        w = torch.randn(B, T, HV, K) * 0.3
        u = torch.randn(B, T, HV, V)
        # a per-key gate cumsum within each 64-token chunk, log2 units, non-positive;
        # deep-gate: about -200 nat per chunk at gscale 50
        step = -torch.rand(B, T, HV, K) * 0.1 * gscale
        gk = torch.empty_like(step)
        starts = [0] + torch.tensor(lens).cumsum(0).tolist()[:-1] if packed else [0]
        bounds = [(s, s + n) for s, n in zip(starts, lens)] if packed else [(0, T)]
        for b0, b1 in bounds:
            for c in range(b0, b1, 64):
                gk[:, c : min(c + 64, b1)] = step[:, c : min(c + 64, b1)].cumsum(1)
        A = torch.randn(B, T, HV, 64) * 0.1
        h0 = torch.randn(N, HV, V, K) if has_h0 else None
        scale = K ** -0.5
        o, ht = fwd.fwd_h_o(q, kg, w, u, gk, A, scale, h0, fs, cu)
        h, v_new, ht_ref = chunk_gated_delta_rule_fwd_h(
            k=kg, w=w, u=u, gk=gk, initial_state=h0, output_final_state=fs, cu_seqlens=cu,
            chunk_size=64, state_v_first=True,
        )
        o_ref = chunk_gla_fwd_o_gk(
            q=q, v=v_new, g=gk, A=A, h=h, scale=scale, cu_seqlens=cu, chunk_size=64,
            state_v_first=True,
        )
        res = {"finite": bool(torch.isfinite(o).all()), "ht_none": ht is None}
        for nm, a, b in (("o", o, o_ref), ("ht", ht, ht_ref)):
            if b is not None:
                assert a.shape == b.shape, (name, nm, a.shape, b.shape)
                res[nm] = float((a.double() - b.double()).norm() / b.double().norm())
        out[name] = res
    print(json.dumps(out))
    """
)


@pytest.mark.slow
def test_fused_state_pass_and_output_match_flas_two_kernels() -> None:
    out = run_interpreted(SCRIPT)
    assert len(out) == 6
    for name, res in out.items():
        assert res["finite"], (name, res)
        fs = name in ("two-k-blocks-two-v-blocks", "gva-kg-per-value-head", "varlen-state",
                      "deep-gate")  # fmt: skip
        assert res["ht_none"] is not fs and ("ht" in res) is fs, (name, res)
        for key in ("o", "ht"):
            if key in res:
                # fp32 throughout: the same math up to summation order
                assert res[key] < 1e-5, (name, key, res[key])
