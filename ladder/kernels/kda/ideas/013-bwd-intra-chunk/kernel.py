"""kda/013 bwd-intra-chunk: kda/012 with the backward's intra-chunk stage on one program per
chunk and K slice.

The forward is kda/012's. The backward is kda/009's (the chain of kda/012) with kda/003's
intra-chunk stage replaced by ``intra.kda_bwd_intra``: the same terms in the same order per
16-token sub-chunk, but one program walks a chunk's four sub-chunks, unrolled at compile
time, where kda/003 launches a program per sub-chunk (intra.py's docstring).

kda/010 wrote the backward chain out with the gate tail passed in and kda/003's intra stage
fixed in it; kda/010 stands on its code as it is (its records), so the chain is written out
once more here as ``kda_bwd_chain``, with both the intra stage and the gate tail passed in,
for later ideas to call instead of copying it again.

Env knobs: those of the modules it imports, and intra.py's KDA_INTRA13_BK, KDA_INTRA13_WARPS
and KDA_INTRA13_STAGES.
"""

from __future__ import annotations

import torch
from ladder.kernels.kda.ideas.i005 import chain, wy
from ladder.kernels.kda.ideas.i006 import dhu
from ladder.kernels.kda.ideas.i009 import gate
from ladder.kernels.kda.ideas.i012 import kernel as k12
from ladder.kernels.kda.ideas.i013 import intra

__all__ = ["CASES", "kda_bwd", "kda_bwd_chain", "kda_fwd"]

CASES = ("dense", "varlen", "gva", "state", "lower_bound", "neg_eigval")

kda_fwd = k12.kda_fwd


def kda_bwd(ctx, do, dht):
    """(dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0) for the output gradients do [B, T, HV, V]
    and dht (the final state's gradient, or None). Raises ValueError for a ctx saved without
    state_v_first."""
    return kda_bwd_chain(ctx, do, dht, intra.kda_bwd_intra, gate.gate_tail)


def kda_bwd_chain(ctx, do, dht, intra_stage, gate_tail):
    """kda/009's backward with ``intra_stage`` for the intra-chunk stage, called as
    ``intra_stage(q, k, gc, beta, dAqk, dAkk, dq, dk, db, dg, cu_seqlens=, chunk_indices=)``
    -> (dq, dk, db, dg) (kda/003's ``intra.kda_bwd_intra`` and this idea's), and
    ``gate_tail`` for its gate tail, called as ``gate_tail(dgc, g_in, A_log, dt_bias,
    lower_bound=, cu_seqlens=, chunk_indices=, chunk_size=)`` -> (dg, dA_log, ddt_bias)
    (kda/009's and kda/010's ``gate.gate_tail``). Returns what ``kda_bwd`` returns; raises
    ValueError for a ctx saved without state_v_first."""
    from fla.modules.norm.l2norm import l2norm_bwd
    from fla.ops.common.chunk_delta_h import chunk_gated_delta_rule_fwd_h
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
        h, v_new, _ = chunk_gated_delta_rule_fwd_h(
            k=kg, w=w, u=u, gk=gc, initial_state=h0, output_final_state=False, cu_seqlens=cu,
            chunk_indices=chunk_indices, chunk_size=chain.CHUNK, state_v_first=True,
        )  # fmt: skip
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
