"""kda/020 bwd-state-wide: kda/014 with the backward's recompute of the chunk states (fla's
state kernel, autotuned to BV 64 and 4 warps) launched at a fixed BV 128 and 8 warps
(``fwdh.fwd_h``), so each chunk's K-wide key tiles are read twice per value head instead of
four times.

The forward is kda/014's. The backward is kda/014's (kda/013's chain with kda/014's intra
stage and kda/009's gate tail) with that one stage replaced. kda/013's ``kda_bwd_chain``
fixes fla's autotuned state recompute in it and stands on its code (records), so the chain is
written out once more here as ``kda_bwd_chain`` with the state recompute passed in too, for
later ideas to call instead of copying it again.

The state-gradient stage (kda/006's ``dhu.bwd_dhu``, the same kind of walk, backwards) takes
its launch from kda/006's knobs (KDA_DHU_BV, KDA_DHU_WARPS, KDA_DHU_STAGES), so a bench of
this idea can widen it too; its NOTES.md says which values its records ran.

Env knobs: those of the modules it imports, and fwdh.py's KDA_FWDH20_BV, KDA_FWDH20_WARPS and
KDA_FWDH20_STAGES.
"""

from __future__ import annotations

import torch
from ladder.kernels.kda.ideas.i005 import chain, wy
from ladder.kernels.kda.ideas.i006 import dhu
from ladder.kernels.kda.ideas.i009 import gate
from ladder.kernels.kda.ideas.i014 import intra
from ladder.kernels.kda.ideas.i014 import kernel as k14
from ladder.kernels.kda.ideas.i020 import fwdh

__all__ = ["CASES", "kda_bwd", "kda_bwd_chain", "kda_fwd"]

CASES = ("dense", "varlen", "gva", "state", "lower_bound", "neg_eigval")

kda_fwd = k14.kda_fwd


def kda_bwd(ctx, do, dht):
    """(dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0) for the output gradients do [B, T, HV, V]
    and dht (the final state's gradient, or None). Raises ValueError for a ctx saved without
    state_v_first."""
    return kda_bwd_chain(ctx, do, dht, intra.kda_bwd_intra, gate.gate_tail, fwdh.fwd_h)


def kda_bwd_chain(ctx, do, dht, intra_stage, gate_tail, state_stage):
    """kda/013's backward with ``intra_stage`` and ``gate_tail`` called as kda/013's
    ``kda_bwd_chain`` calls them, and ``state_stage`` for the recompute of the chunk states,
    called as ``state_stage(kg, w, u, gc, h0, cu_seqlens=, chunk_indices=, chunk_size=)`` ->
    (h [B, NT, HV, V, K], v_new like u) (this idea's ``fwdh.fwd_h``; fla's
    ``chunk_gated_delta_rule_fwd_h`` with state_v_first returns the same first two). Returns
    what ``kda_bwd`` returns; raises ValueError for a ctx saved without state_v_first."""
    from fla.modules.norm.l2norm import l2norm_bwd
    from fla.ops.common.gate import fused_beta_sigmoid_bwd
    from fla.ops.kda.chunk_bwd import chunk_kda_bwd_dAv
    from fla.ops.kda.gate import kda_gate_chunk_cumsum
    from fla.ops.kda.wy_fast import recompute_w_u_fwd

    (q, q_rstd, k, k_rstd, v, _g_cumsum, g_in, beta_raw, beta, A_log, dt_bias, Aqk, Akk,
     *_unused, h0, cu, chunk_indices, _chunk_offsets) = ctx.saved_tensors  # fmt: skip
    lb, scale = ctx.lower_bound, ctx.scale
    if not ctx.state_v_first:
        raise ValueError("the chain's stages read h and dh as [V, K]: it needs state_v_first=True")
    H, HV = q.shape[2], v.shape[2]
    with torch.cuda.device(q.device):
        gc = kda_gate_chunk_cumsum(
            g=g_in, A_log=A_log, dt_bias=dt_bias, scale=chain.RCP_LN2, chunk_size=chain.CHUNK,
            cu_seqlens=cu, chunk_indices=chunk_indices, lower_bound=lb,
        )  # fmt: skip
        w, u, qg, kg = recompute_w_u_fwd(
            q=q, k=k, v=v, beta=beta, A=Akk, gk=gc, cu_seqlens=cu, chunk_indices=chunk_indices
        )
        h, v_new = state_stage(
            kg, w, u, gc, h0, cu_seqlens=cu, chunk_indices=chunk_indices, chunk_size=chain.CHUNK
        )
        dAqk, dv = chunk_kda_bwd_dAv(
            q=q, k=k, v=v_new, do=do, A=Aqk, scale=scale, cu_seqlens=cu, chunk_size=chain.CHUNK,
            chunk_indices=chunk_indices,
        )  # fmt: skip
        dh, dh0, dv = dhu.bwd_dhu(
            qg, kg, w, do, dv, gc, h0, dht, scale, cu_seqlens=cu, chunk_indices=chunk_indices,
            chunk_size=chain.CHUNK,
        )  # fmt: skip
        del w, u, qg, kg  # dead from here: the WY stage's scratch may take their memory
        dq, dk, dv, db, dg, dAkk = wy.kda_bwd_wy(
            q, k, v, v_new, gc, beta, Akk, h, do, dh, dv, scale, cu_seqlens=cu,
            chunk_indices=chunk_indices,
        )  # fmt: skip
        del h, dh, v_new
        dq, dk, db, dg = intra_stage(
            q, k, gc, beta, dAqk, dAkk, dq, dk, db, dg, cu_seqlens=cu, chunk_indices=chunk_indices
        )
        if HV > H:
            dq = dq.view(*dq.shape[:2], H, HV // H, dq.shape[-1]).sum(dim=3)
            dk = dk.view(*dk.shape[:2], H, HV // H, dk.shape[-1]).sum(dim=3)
        dg, dA, dbias = gate_tail(
            dg, g_in, A_log, dt_bias, lower_bound=lb, cu_seqlens=cu, chunk_indices=chunk_indices,
            chunk_size=chain.CHUNK,
        )  # fmt: skip
        dq = l2norm_bwd(q, q_rstd, dq)
        dk = l2norm_bwd(k, k_rstd, dk)
        db = fused_beta_sigmoid_bwd(x=beta_raw, dy=db, scale=2.0 if ctx.allow_neg_eigval else 1.0)
    return (dq.to(q), dk.to(k), dv.to(v), dg.to(g_in), db.to(beta_raw), dA, dbias, dh0)
