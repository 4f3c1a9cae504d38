"""kda idea 008's fused state pass and output (`fwd.fwd_h_o`), and idea 019's (the same walk
reading qg = q * 2^g in place of q and the gate tile), against fla 0.6.0's two kernels they
replace (`chunk_gated_delta_rule_fwd_h`, then `chunk_gla_fwd_o_gk`), on Triton's CPU
interpreter in fp32 (the interpreter computes bf16 tensor-core products wrongly).

The cases cover what the kernel's indexing has to get right: T not a multiple of the chunk,
K of one 64-wide block and of two (the second ragged), V split over two BV blocks (the
second ragged), GVA (two value heads per q/k head, kg per value head or per q/k head),
packed sequences of 1 to 70 tokens with an initial and a final state, and a gate of about
-110 nat per 16 tokens (every exponent of the kernel is at most 0, so nothing may
overflow).
The full chain with this stage runs in tests/test_kda_chains.py; the bf16 numbers are the
GPU bench's.

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
    import fla.ops.common.chunk_delta_h, fla.ops.gla.chunk  # noqa: F401 (adjusted below)
    from tests.interpreted import chunk_local_cumsum, fla_on_the_interpreter

    fla_on_the_interpreter()
    # outputs allocated uninitialised start as NaN here, so a row no kernel writes shows
    _empty_like = torch.empty_like
    torch.empty_like = lambda t, **kw: _empty_like(t, **kw).fill_(float("nan"))
    from fla.ops.common.chunk_delta_h import chunk_gated_delta_rule_fwd_h
    from fla.ops.gla.chunk import chunk_gla_fwd_o_gk
    import importlib
    fwd = importlib.import_module("ladder.kernels.kda.ideas.i__IDEA__.fwd")
    takes_qg = "__IDEA__" == "019"

    cases = [
        # name, B, H, HK, HV, K, V, lengths (one per batch row, or packed), h0, final, gate scale
        ("dense-ragged-t", 2, 1, 1, 1, 32, 32, [100, 100], False, False, 1.0),
        ("two-k-blocks-two-v-blocks", 1, 1, 1, 1, 96, 80, [130], True, True, 1.0),
        ("gva-kg-per-value-head", 1, 1, 2, 2, 32, 32, [70], False, True, 1.0),
        ("gva-kg-per-qk-head", 1, 1, 1, 2, 32, 32, [70], True, False, 1.0),
        ("varlen-state", 1, 1, 1, 1, 32, 32, [1, 40, 2, 70, 64], True, True, 1.0),
        ("deep-gate", 1, 1, 1, 1, 32, 32, [150], True, True, 200.0),
        # h0 with transposed storage (the kernel and fla's fallback read it contiguous)
        ("h0-strided", 1, 1, 1, 1, 32, 32, [1, 40, 70], "t", True, 1.0),
        # above MAX_K: fla's two kernels, with the same strided h0
        ("k-above-max-fallback", 1, 1, 1, 1, 160, 32, [90], "t", True, 1.0),
        # a packed batch whose sequences end before T: the rows past them are 0, as fla's
        ("packed-short-of-t", 1, 1, 1, 1, 32, 32, [30, 41, None], False, True, 1.0),
    ]
    out = {}
    for name, B, H, HK, HV, K, V, lens, has_h0, fs, gscale in cases:
        torch.manual_seed(0)
        pad = 0
        if lens[-1] is None:  # the batch runs 9 rows past its last sequence
            lens, pad = lens[:-1], 9
        packed = B == 1 and len(lens) > 1
        T = (sum(lens) if packed else lens[0]) + pad
        cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist()) if packed else None
        N = len(lens) if packed else B
        q = torch.nn.functional.normalize(torch.randn(B, T, H, K), dim=-1)
        kg = torch.randn(B, T, HK, K) * 0.3
        w = torch.randn(B, T, HV, K) * 0.3
        u = torch.randn(B, T, HV, V)
        # a per-key gate cumsum within each 64-token chunk, log2 units, non-positive;
        # deep-gate, gscale 200: -10 log2 units a token on average, about -110 nat per 16
        # tokens (the layer's non-safe gate reaches below -80 nat per 16 tokens)
        step = -torch.rand(B, T, HV, K) * 0.1 * gscale
        gk = chunk_local_cumsum(step, lens, packed)
        A = torch.randn(B, T, HV, 64) * 0.1
        h0 = torch.randn(N, HV, V, K) if has_h0 else None
        if has_h0 == "t":
            h0 = h0.transpose(-1, -2).contiguous().transpose(-1, -2)
            assert not h0.is_contiguous()
        scale = K ** -0.5
        if takes_qg:
            # qg as fla's w/u stage writes it: q of each value head's q/k head, times 2^g
            qg = q.repeat_interleave(HV // H, 2) * torch.exp2(gk)
            if K > fwd.MAX_K:
                try:
                    fwd.fwd_h_o(qg, kg, w, u, gk, A, scale, h0, fs, cu)
                except ValueError as e:
                    out[name] = {"refused": str(e)}
                    continue
            o, ht = fwd.fwd_h_o(qg, kg, w, u, gk, A, scale, h0, fs, cu)
        else:
            o, ht = fwd.fwd_h_o(q, kg, w, u, gk, A, scale, h0, fs, cu)
        h0c = h0.contiguous() if h0 is not None else None  # the reference reads it so
        h, v_new, ht_ref = chunk_gated_delta_rule_fwd_h(
            k=kg, w=w, u=u, gk=gk, initial_state=h0c, output_final_state=fs, cu_seqlens=cu,
            chunk_size=64, state_v_first=True,
        )
        o_ref = chunk_gla_fwd_o_gk(
            q=q, v=v_new, g=gk, A=A, h=h, scale=scale, cu_seqlens=cu, chunk_size=64,
            state_v_first=True,
        )
        res = {"finite": bool(torch.isfinite(o).all()), "ht_none": ht is None,
               "tail_zero": bool((o[:, T - pad :] == 0).all())}
        for nm, a, b in (("o", o, o_ref), ("ht", ht, ht_ref)):
            if b is not None:
                assert a.shape == b.shape, (name, nm, a.shape, b.shape)
                res[nm] = float((a.double() - b.double()).norm() / b.double().norm())
        out[name] = res
    print(json.dumps(out))
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("idea", ["008", "019"])
def test_fused_state_pass_and_output_match_flas_two_kernels(idea) -> None:
    out = run_interpreted(SCRIPT.replace("__IDEA__", idea))
    assert len(out) == 9
    if idea == "019":  # K above the walk's 128: refused, naming kda/008's stage
        refused = out.pop("k-above-max-fallback")
        assert "K <= 128" in refused["refused"] and "kda/008" in refused["refused"], refused
    for name, res in out.items():
        assert res["finite"] and res["tail_zero"], (name, res)
        fs = name in ("two-k-blocks-two-v-blocks", "gva-kg-per-value-head", "varlen-state",
                      "deep-gate", "h0-strided", "k-above-max-fallback", "packed-short-of-t")  # fmt: skip
        assert res["ht_none"] is not fs and ("ht" in res) is fs, (name, res)
        for key in ("o", "ht"):
            if key in res:
                # fp32 throughout: the same math up to summation order
                assert res[key] < 1e-5, (name, key, res[key])


def _inputs(B=1, T=70, H=1, HK=1, HV=1, K=32, V=32):
    import torch

    return dict(
        q=torch.randn(B, T, H, K), kg=torch.randn(B, T, HK, K), w=torch.randn(B, T, HV, K),
        u=torch.randn(B, T, HV, V), gk=-torch.rand(B, T, HV, K), A=torch.randn(B, T, HV, 64),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(A=(1, 70, 1, 32)), "A must be [1, 70, 1, 64]"),
        (dict(gk=(1, 70, 1, 16)), "gk must be [1, 70, 1, 32]"),
        (dict(u=(1, 70, 3, 32)), "w must be [1, 70, 3, 32]"),
        (dict(kg=(1, 70, 2, 32)), "multiple of q's H 1 and kg's 2"),
        (dict(h0=(1, 2, 32, 32)), "initial_state must be [1, 1, 32, 32]"),
        (dict(cu=(2, 4)), "cu_seqlens must be [N + 1]"),
        (dict(q_strided=True), "q must be contiguous"),
        (dict(chunk_size=32), "chunks by 64 tokens"),
    ],
)
def test_fused_stage_refuses_bad_inputs_before_any_launch(change, message) -> None:
    """A tensor of another shape would be read out of bounds by the kernel (no error on a
    GPU, garbage out): the wrapper refuses it first, naming it."""
    import torch
    from ladder.kernels.kda.ideas.i008 import fwd

    import ladder  # noqa: F401  (the idea import finder)

    x = _inputs()
    for name in ("A", "gk", "u", "kg"):
        if name in change:
            x[name] = torch.randn(change[name])
    if "q_strided" in change:
        x["q"] = torch.randn(1, 70, 1, 64)[..., :32]
    h0 = torch.randn(change["h0"]) if "h0" in change else None
    cu = torch.zeros(change["cu"], dtype=torch.int64) if "cu" in change else None
    with pytest.raises(ValueError, match=re.escape(message)):
        fwd.fwd_h_o(
            x["q"], x["kg"], x["w"], x["u"], x["gk"], x["A"], 32**-0.5, h0, False, cu,
            change.get("chunk_size", 64),
        )  # fmt: skip


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (dict(A=(1, 70, 1, 32)), "A must be [1, 70, 1, 64]"),
        (dict(gk=(1, 70, 1, 16)), "gk must be [1, 70, 1, 32]"),
        (dict(u=(1, 70, 3, 32)), "u must be [1, 70, 1, 32]"),
        (dict(kg=(1, 70, 2, 32)), "HV 1 (qg's) must be a multiple of kg's heads 2"),
        (dict(qg=(1, 70, 1, 160)), "K <= 128 key columns, got K 160: kda/008's"),
        (dict(qg=(1, 70, 1, 300)), "got K 300: no stage here or in fla runs K above 256"),
        (dict(kg=(1, 70, 32)), "kg must be 4-D, got (1, 70, 32)"),
        (dict(qg_dtype=True), "qg, kg and w must share one dtype"),
        (dict(h0=(1, 2, 32, 32)), "initial_state must be [1, 1, 32, 32]"),
        (dict(cu=(2, 4)), "cu_seqlens must be [N + 1]"),
        (dict(qg_strided=True), "qg must be contiguous"),
        (dict(chunk_size=32), "chunks by 64 tokens"),
    ],
)
def test_qg_stage_refuses_bad_inputs_before_any_launch(change, message) -> None:
    """kda/019's walk reads qg [B, T, HV, K] where kda/008's reads q: a tensor that does not
    fit is refused before any launch, naming it; K above the walk's 128 names kda/008's
    stage, which takes it."""
    import torch
    from ladder.kernels.kda.ideas.i019 import fwd

    import ladder  # noqa: F401  (the idea import finder)

    x = _inputs()
    x["qg"] = x.pop("q")
    for name in ("A", "gk", "u", "kg", "qg"):
        if name in change:
            x[name] = torch.randn(change[name])
    if "qg_strided" in change:
        x["qg"] = torch.randn(1, 70, 1, 64)[..., :32]
    if "qg_dtype" in change:  # q * 2^g in fp32, as bf16 q times an fp32 gate promotes
        x["qg"] = x["qg"].double()
    h0 = torch.randn(change["h0"]) if "h0" in change else None
    cu = torch.zeros(change["cu"], dtype=torch.int64) if "cu" in change else None
    with pytest.raises(ValueError, match=re.escape(message)):
        fwd.fwd_h_o(
            x["qg"], x["kg"], x["w"], x["u"], x["gk"], x["A"], 32**-0.5, h0, False, cu,
            change.get("chunk_size", 64),
        )  # fmt: skip
