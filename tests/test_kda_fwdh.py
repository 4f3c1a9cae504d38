"""kda idea 020's fixed-launch recompute of the chunk states (`fwdh.fwd_h`: fla 0.6.0's state
kernel launched at a fixed BV and warps) against fla's own autotuned wrapper
(`chunk_gated_delta_rule_fwd_h`), on Triton's CPU interpreter in fp32 (the interpreter
computes bf16 tensor-core products wrongly).

The fixed launch is what this idea changes, so the cases are about its indexing: V split over
several BV blocks with a ragged last one (BV set to 16 for the test, where fla's trimmed
autotuner keeps BV 32), K of two 64-wide blocks (the second ragged), T not a multiple of the
chunk, kg with fewer heads than the value heads, packed sequences of 1 to 70 tokens with an
initial state, a gate of about -110 nat per 16 tokens, and K above MAX_K (fla's wrapper).
h and v_new must equal fla's to fp32 rounding.

Runs in a subprocess (`tests.interpreted.run_interpreted`).
"""

from __future__ import annotations

import re
import textwrap

import pytest

from tests.interpreted import run_interpreted

SCRIPT = textwrap.dedent(
    r"""
    import json
    import torch
    import ladder  # the idea import finder
    import fla.ops.common.chunk_delta_h  # noqa: F401 (adjusted below)
    from tests.interpreted import chunk_local_cumsum, fla_on_the_interpreter

    fla_on_the_interpreter()
    from fla.ops.common.chunk_delta_h import chunk_gated_delta_rule_fwd_h
    from ladder.kernels.kda.ideas.i020 import fwdh

    fwdh.BV = 16  # several V blocks at the test's small V; fla's kept config has BV 32
    cases = [
        # name, B, HK, HV, K, V, lengths (one per batch row, or packed), h0, gate scale
        ("dense-ragged-t-v-blocks", 2, 1, 1, 32, 80, [100, 100], False, 1.0),
        ("two-k-blocks", 1, 1, 1, 96, 32, [130], True, 1.0),
        ("kg-per-qk-head", 1, 1, 2, 32, 48, [70], True, 1.0),
        ("varlen-h0", 1, 1, 1, 32, 32, [1, 40, 2, 70, 64], True, 1.0),
        ("deep-gate", 1, 1, 1, 32, 32, [150], True, 200.0),
        ("k-above-max", 1, 1, 1, 160, 32, [90], True, 1.0),
    ]
    out = {}
    for name, B, HK, HV, K, V, lens, has_h0, gscale in cases:
        torch.manual_seed(0)
        packed = B == 1 and len(lens) > 1
        T = sum(lens) if packed else lens[0]
        cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist()) if packed else None
        N = len(lens) if packed else B
        kg = torch.randn(B, T, HK, K) * 0.3
        w = torch.randn(B, T, HV, K) * 0.3
        u = torch.randn(B, T, HV, V)
        # a per-key gate cumsum within each 64-token chunk, log2 units, non-positive
        step = -torch.rand(B, T, HV, K) * 0.1 * gscale
        gk = chunk_local_cumsum(step, lens, packed)
        h0 = torch.randn(N, HV, V, K) if has_h0 else None
        h, v_new = fwdh.fwd_h(kg, w, u, gk, h0, cu_seqlens=cu)
        h_ref, v_ref, _ = chunk_gated_delta_rule_fwd_h(
            k=kg, w=w, u=u, gk=gk, initial_state=h0, output_final_state=False, cu_seqlens=cu,
            chunk_size=64, state_v_first=True,
        )
        res = {"finite": bool(torch.isfinite(h).all() and torch.isfinite(v_new).all())}
        for nm, a, b in (("h", h, h_ref), ("v_new", v_new, v_ref)):
            assert a.shape == b.shape, (name, nm, a.shape, b.shape)
            res[nm] = float((a.double() - b.double()).norm() / b.double().norm())
        out[name] = res
    print(json.dumps(out))
    """
)


@pytest.mark.slow
def test_fixed_launch_state_recompute_matches_flas_wrapper() -> None:
    out = run_interpreted(SCRIPT)
    assert len(out) == 6
    for name, res in out.items():
        assert res["finite"], (name, res)
        for key in ("h", "v_new"):
            # fp32 throughout, fla's own kernel: the same math up to summation order
            assert res[key] < 1e-5, (name, key, res[key])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(K=288), "K 288 > 256"),
        (dict(B=2, cu=[0, 30, 70]), "a packed batch has B == 1, got B 2"),
        # checked before the K > MAX_K hand-off to fla's wrapper, too
        (dict(B=2, K=160, cu=[0, 30, 70]), "a packed batch has B == 1, got B 2"),
        (dict(cu=[70]), "cu_seqlens must be [N + 1], got [1]"),
        (dict(h0=(1, 1, 16, 32)), "h0 must be [1, 1, 32, 32], got [1, 1, 16, 32]"),
        (dict(H=2), "u's value heads HV 1 must be a multiple of kg's heads 2"),
        (dict(w=(1, 70, 1, 16)), "w must be [1, 70, 1, 32], got [1, 70, 1, 16]"),
        (dict(gk=(1, 70, 1, 16)), "gk must be [1, 70, 1, 32], got [1, 70, 1, 16]"),
        (dict(kg_3d=True), "kg must be 4-D, got (1, 70, 32)"),
        (dict(u_strided=True), "u must be contiguous"),
        (dict(BV=48), "KDA_FWDH20_BV 48 must be a power of two"),
        (dict(BV=8), "KDA_FWDH20_BV 8 must be a power of two of at least 16"),
    ],
)
def test_fixed_launch_refuses_what_it_cannot_run_before_any_launch(
    change, message, monkeypatch
) -> None:
    """fla's kernel reads past a tensor of another shape without an error (garbage out, or a
    division by zero for more kg heads than value heads): the wrapper refuses each such call
    first, naming what is wrong."""
    import torch
    from ladder.kernels.kda.ideas.i020 import fwdh

    import ladder  # noqa: F401  (the idea import finder)

    if "BV" in change:
        monkeypatch.setattr(fwdh, "BV", change["BV"])
    B, T, K, V, H = change.get("B", 1), 70, change.get("K", 32), 32, change.get("H", 1)
    kg, w, gk = torch.randn(B, T, H, K), torch.randn(B, T, 1, K), -torch.rand(B, T, 1, K)
    u = torch.randn(B, T, 1, V)
    if "w" in change:
        w = torch.randn(change["w"])
    if "gk" in change:
        gk = -torch.rand(change["gk"])
    if change.get("kg_3d"):
        kg = kg[:, :, 0]
    if change.get("u_strided"):
        u = torch.randn(B, T, 1, 2 * V)[..., :V]
    h0 = torch.randn(change["h0"]) if "h0" in change else None
    cu = torch.tensor(change["cu"]) if "cu" in change else None
    with pytest.raises(ValueError, match=re.escape(message)):
        fwdh.fwd_h(kg, w, u, gk, h0, cu_seqlens=cu)
