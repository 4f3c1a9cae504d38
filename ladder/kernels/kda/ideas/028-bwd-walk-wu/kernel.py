"""kda/028 bwd-walk-wu: kda/027's chain with the backward's w/u kernel folded into the
backward's recompute of the chunk states, as kda/027 folds the forward's into the forward's
walk.

kda/027's backward is kda/025's: it recomputes w, u, qg and kg with fla's w/u kernel (q given)
and then h and v_new with fla's state kernel, both at kda/024's fixed launches. Here a
row-wise kernel writes qg, kb and kg, and a walk forms w and u per chunk and runs fla's
recurrence on them (``recompute.py``), with fla's operands, products and roundings: the
stages after it (dAv, the state gradient, the WY, intra-chunk and gate stages, the L2 norms)
get what kda/025's get, bit for bit, and are kda/025's.

The forward is kda/027's. Where kda/025's backward computes its gate cumsum itself (K above
128, where kda/025's forward is fla's and keeps none) or K is above the walk's 128, the
backward is kda/025's.

Env knobs: this idea's ``recompute.py`` (KDA_BWDWALK28_*, KDA_QKG28_WARPS); kda/027's and
those of the modules it imports.
"""

from __future__ import annotations

import torch
from ladder.kernels.kda.ideas.i005 import chain
from ladder.kernels.kda.ideas.i025 import kernel as k25
from ladder.kernels.kda.ideas.i027 import kernel as k27
from ladder.kernels.kda.ideas.i028 import recompute

__all__ = ["CASES", "STAGES", "kda_bwd", "kda_bwd_chain", "kda_fwd"]

CASES = ("dense", "varlen", "gva", "state", "lower_bound", "neg_eigval")  # kda/027's
STAGES = k27.STAGES
kda_fwd = k27.kda_fwd


def kda_bwd(ctx, do, dht):
    """(dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0) for the output gradients do [B, T, HV, V]
    and dht (the final state's gradient, or None). Raises ValueError as kda/025's does."""
    return kda_bwd_chain(ctx, do, dht, STAGES)


def kda_bwd_chain(ctx, do, dht, st):
    """kda/025's ``kda_bwd_chain`` with the recompute of w, qg, kg, h and v_new from
    ``recompute.recompute`` (module docstring) in place of ``st.w_u`` and ``st.fwd_h``; the
    other stages from ``st``. Where the forward kept no gate cumsum (``ctx.gc_saved``
    false) or K is above ``recompute.MAX_K``: kda/025's backward."""
    from fla.ops.common.gate import fused_beta_sigmoid_bwd

    (q, q_rstd, k, k_rstd, v, gc, g_in, beta_raw, beta, A_log, dt_bias, Aqk, Akk,
     *_unused, h0, cu, chunk_indices, _chunk_offsets) = ctx.saved_tensors  # fmt: skip
    if not getattr(ctx, "gc_saved", False) or q.shape[-1] > recompute.MAX_K:
        return k25.kda_bwd_chain(ctx, do, dht, st)
    if not ctx.state_v_first:
        raise ValueError("the chain's stages read h and dh as [V, K]: it needs state_v_first=True")
    lb, scale = ctx.lower_bound, ctx.scale
    H, HV = q.shape[2], v.shape[2]
    with torch.cuda.device(q.device):
        w, qg, kg, h, v_new = recompute.recompute(
            q, k, v, gc, beta, Akk, h0, cu_seqlens=cu, chunk_indices=chunk_indices
        )
        dAqk, dv = st.dav(q, k, v_new, do, Aqk, scale, cu, chain.CHUNK, chunk_indices)
        dh, dh0, dv = st.dhu(
            qg, kg, w, do, dv, gc, h0, dht, scale, cu_seqlens=cu, chunk_indices=chunk_indices,
            chunk_size=chain.CHUNK,
        )  # fmt: skip
        del w, qg, kg  # dead from here: the WY stage's scratch may take their memory
        dq, dk, dv, db, dg, dAkk = st.wy(
            q, k, v, v_new, gc, beta, Akk, h, do, dh, dv, scale, cu_seqlens=cu,
            chunk_indices=chunk_indices,
        )  # fmt: skip
        del h, dh, v_new
        dq, dk, db, dg = st.intra_bwd(
            q, k, gc, beta, dAqk, dAkk, dq, dk, db, dg, cu_seqlens=cu, chunk_indices=chunk_indices
        )
        if HV > H:
            dq = dq.view(*dq.shape[:2], H, HV // H, dq.shape[-1]).sum(dim=3)
            dk = dk.view(*dk.shape[:2], H, HV // H, dk.shape[-1]).sum(dim=3)
        dg, dA, dbias = st.gate_tail(
            dg, g_in, A_log, dt_bias, lower_bound=lb, cu_seqlens=cu, chunk_indices=chunk_indices,
            chunk_size=chain.CHUNK,
        )  # fmt: skip
        dq = st.l2norm_bwd(q, q_rstd, dq)
        dk = st.l2norm_bwd(k, k_rstd, dk)
        db = fused_beta_sigmoid_bwd(x=beta_raw, dy=db, scale=2.0 if ctx.allow_neg_eigval else 1.0)
    return (dq.to(q), dk.to(k), dv.to(v), dg.to(g_in), db.to(beta_raw), dA, dbias, dh0)
