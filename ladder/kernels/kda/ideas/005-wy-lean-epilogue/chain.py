"""The chain of fla 0.6.0's chunk_kda stages that kda ideas 005 and later run, with the stages
an idea replaces passed in.

``kda_fwd`` is fla's ChunkKDAFunction.forward (called with a stand-in ctx that keeps what it
saves). ``kda_bwd_chain`` runs fla's backward stages in fla's order, with the intra-chunk
stage kda/003's (``intra.kda_bwd_intra``) and the fused WY/dq/dk/dg and state-gradient
stages the caller's. Everything else (gradients of the L2 norm, the gate and the beta
sigmoid; GVA reduction; packed sequences; initial and final state) is fla's, called as fla
calls it. Tensors the backward no longer needs are released before the WY stage, whose
scratch then reuses their memory. kda/004's kernel.py is the same chain with its stages
fixed (its records stand on that code).

No knobs here: an idea's stages carry them.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from ladder.kernels.kda.ideas.i003 import intra

__all__ = ["kda_bwd_chain", "kda_fwd"]

CHUNK = 64
RCP_LN2 = 1.4426950408889634


class _Saved(SimpleNamespace):
    """What the forward keeps for the backward (fla's ctx attributes and saved tensors)."""

    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors


def kda_fwd(q, k, v, g, beta, A_log, dt_bias, scale, initial_state, output_final_state,
            cu_seqlens, lower_bound, safe_gate, allow_neg_eigval):  # fmt: skip
    """fla's forward with the layer's flags: (o [B, T, HV, V] in q's dtype, final_state
    [N, HV, V, K] fp32 or None, ctx)."""
    from fla.ops.kda.chunk import ChunkKDAFunction

    ctx = _Saved()
    with torch.cuda.device(q.device):
        o, ht = ChunkKDAFunction.forward(
            ctx, q, k, v, g, beta, A_log, dt_bias, scale, initial_state, output_final_state,
            True, True, True, allow_neg_eigval, True, cu_seqlens, None, safe_gate, lower_bound,
            CHUNK, False, False, None, False, None,
        )  # fmt: skip
    return o, ht, ctx


def kda_bwd_chain(ctx, do, dht, wy_stage, dhu_stage=None):
    """(dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0) for the output gradients do [B, T, HV, V]
    and dht (the final state's gradient, or None).

    wy_stage: the fused WY/dq/dk/dg stage, called as ``wy_stage(q, k, v, v_new, g, beta, A, h,
    do, dh, dv, scale, cu_seqlens=, chunk_indices=)`` (kda/004's and kda/005's
    ``wy.kda_bwd_wy``). dhu_stage: the state-gradient stage, called as ``dhu_stage(q, k, w,
    do, dv, gk, h0, dht, scale, cu_seqlens=, chunk_indices=, chunk_size=)`` -> (dh, dh0, dv2)
    (kda/006's ``dhu.bwd_dhu``); None: fla's ``chunk_gated_delta_rule_bwd_dhu``."""
    from fla.modules.norm.l2norm import l2norm_bwd
    from fla.ops.common.chunk_delta_h import (
        chunk_gated_delta_rule_bwd_dhu,
        chunk_gated_delta_rule_fwd_h,
    )
    from fla.ops.common.gate import fused_beta_sigmoid_bwd
    from fla.ops.kda.chunk_bwd import chunk_kda_bwd_dAv
    from fla.ops.kda.gate import kda_gate_bwd, kda_gate_chunk_cumsum
    from fla.ops.kda.wy_fast import recompute_w_u_fwd
    from fla.ops.utils import chunk_local_cumsum

    (q, q_rstd, k, k_rstd, v, _g_cumsum, g_in, beta_raw, beta, A_log, dt_bias, Aqk, Akk,
     *_unused, h0, cu, chunk_indices, _chunk_offsets) = ctx.saved_tensors  # fmt: skip
    lb, scale, svf = ctx.lower_bound, ctx.scale, ctx.state_v_first
    if not svf:
        raise ValueError("the chain's stages read h and dh as [V, K]: it needs state_v_first=True")
    H, HV = q.shape[2], v.shape[2]
    with torch.cuda.device(q.device):
        gc = kda_gate_chunk_cumsum(
            g=g_in, A_log=A_log, dt_bias=dt_bias, scale=RCP_LN2, chunk_size=CHUNK,
            cu_seqlens=cu, chunk_indices=chunk_indices, lower_bound=lb,
        )  # fmt: skip
        w, u, qg, kg = recompute_w_u_fwd(
            q=q, k=k, v=v, beta=beta, A=Akk, gk=gc, cu_seqlens=cu, chunk_indices=chunk_indices
        )
        h, v_new, _ = chunk_gated_delta_rule_fwd_h(
            k=kg, w=w, u=u, gk=gc, initial_state=h0, output_final_state=False, cu_seqlens=cu,
            chunk_indices=chunk_indices, chunk_size=CHUNK, state_v_first=svf,
        )  # fmt: skip
        dAqk, dv = chunk_kda_bwd_dAv(
            q=q, k=k, v=v_new, do=do, A=Aqk, scale=scale, cu_seqlens=cu, chunk_size=CHUNK,
            chunk_indices=chunk_indices,
        )  # fmt: skip
        if dhu_stage is None:
            dh, dh0, dv = chunk_gated_delta_rule_bwd_dhu(
                q=qg, k=kg, w=w, gk=gc, h0=h0, dht=dht, do=do, dv=dv, scale=scale,
                cu_seqlens=cu, chunk_size=CHUNK, chunk_indices=chunk_indices,
                state_v_first=svf,
            )  # fmt: skip
        else:
            dh, dh0, dv = dhu_stage(
                qg, kg, w, do, dv, gc, h0, dht, scale, cu_seqlens=cu,
                chunk_indices=chunk_indices, chunk_size=CHUNK,
            )  # fmt: skip
        del w, u, qg, kg  # dead from here: the WY stage's scratch may take their memory
        dq, dk, dv, db, dg, dAkk = wy_stage(
            q, k, v, v_new, gc, beta, Akk, h, do, dh, dv, scale, cu_seqlens=cu,
            chunk_indices=chunk_indices,
        )  # fmt: skip
        del h, dh, v_new
        dq, dk, db, dg = intra.kda_bwd_intra(
            q, k, gc, beta, dAqk, dAkk, dq, dk, db, dg, cu_seqlens=cu, chunk_indices=chunk_indices
        )
        if HV > H:
            dq = dq.view(*dq.shape[:2], H, HV // H, dq.shape[-1]).sum(dim=3)
            dk = dk.view(*dk.shape[:2], H, HV // H, dk.shape[-1]).sum(dim=3)
        dg = chunk_local_cumsum(
            dg, chunk_size=CHUNK, reverse=True, cu_seqlens=cu, chunk_indices=chunk_indices
        )
        dg, dA, dbias = kda_gate_bwd(g=g_in, A_log=A_log, dt_bias=dt_bias, dyg=dg, lower_bound=lb)
        dq = l2norm_bwd(q, q_rstd, dq)
        dk = l2norm_bwd(k, k_rstd, dk)
        db = fused_beta_sigmoid_bwd(x=beta_raw, dy=db, scale=2.0 if ctx.allow_neg_eigval else 1.0)
    return (dq.to(q), dk.to(k), dv.to(v), dg.to(g_in), db.to(beta_raw), dA, dbias, dh0)
