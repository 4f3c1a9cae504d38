"""kda/003 intra-anchored-diag: fla's chunk_kda chain with two backward stages replaced.

The forward is fla 0.6.0's ChunkKDAFunction.forward (called with a stand-in ctx that keeps
what it saves). The backward runs fla's stages in fla's order with two changes:

- the fused WY/dq/dk/dg kernel (``chunk_kda_bwd_kernel_wy_dqkg_fused``) launched with one
  fixed Hopper configuration (``KDA_WY_*``: BK 128, BV 64, 8 warps, 2 stages by default) as
  in kda/002, instead of fla's autotuned pick; no autotuning;
- the intra-chunk stage is ``intra.kda_bwd_intra``: fla's grid and off-diagonal products,
  with each diagonal 16 x 16 tile done as two midpoint-anchored tensor-core products when the
  tile's gate range allows it (checked per tile at run time) and an exact serial loop
  otherwise (``KDA_INTRA_*`` knobs: BK, warps, stages).

Everything else (gradients of the L2 norm, the gate and the beta sigmoid; GVA reduction;
packed sequences; initial and final state) is fla's, called as fla calls it.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import torch
import triton
from ladder.kernels.kda.ideas.i003 import intra

__all__ = ["CASES", "kda_bwd", "kda_fwd"]

CASES = ("dense", "varlen", "gva", "state", "lower_bound", "neg_eigval")
CHUNK = 64
RCP_LN2 = 1.4426950408889634

WY_BK = int(os.environ.get("KDA_WY_BK", "128"))
WY_BV = int(os.environ.get("KDA_WY_BV", "64"))
WY_WARPS = int(os.environ.get("KDA_WY_WARPS", "8"))
WY_STAGES = int(os.environ.get("KDA_WY_STAGES", "2"))


class _Saved(SimpleNamespace):
    """What the forward keeps for the backward (fla's ctx attributes and saved tensors)."""

    def save_for_backward(self, *tensors):
        self.saved_tensors = tensors


def _jit(kernel):
    """The triton.jit function under fla's heuristics and autotuning wrappers."""
    while not isinstance(kernel, triton.runtime.jit.JITFunction):
        kernel = kernel.fn
    return kernel


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


def _wy_dqkg(q, k, v, v_new, g, beta, A, h, do, dh, dv, scale, cu, chunk_indices):
    """fla's fused WY/dq/dk/dg kernel at this idea's launch configuration: (dq, dk, dv2, db,
    dg, dAkk), dq/dk/dg fp32 [B, T, HV, K], db fp32 beta's shape, dAkk fp32 [B, T, HV, 64]."""
    from fla.ops.kda.chunk_bwd import chunk_kda_bwd_kernel_wy_dqkg_fused

    B, T, H, K = k.shape
    HV, V = v.shape[2], v.shape[3]
    NT = triton.cdiv(T, CHUNK) if cu is None else len(chunk_indices)
    dq = g.new_empty(B, T, HV, K, dtype=torch.float)
    dk = g.new_empty(B, T, HV, K, dtype=torch.float)
    dv2 = torch.empty_like(v)
    dg = torch.empty_like(g, dtype=torch.float)
    db = torch.empty_like(beta, dtype=torch.float)
    dA = torch.empty_like(A, dtype=torch.float)
    _jit(chunk_kda_bwd_kernel_wy_dqkg_fused)[(NT, B * HV)](
        q, k, v, v_new, g, beta, A, h, do, dh, dq, dk, dv, dv2, dg, db, dA, cu, chunk_indices,
        scale, T, H=H, HV=HV, K=K, V=V, BT=CHUNK, BK=WY_BK, BV=WY_BV, STATE_V_FIRST=True,
        IS_VARLEN=cu is not None, USE_GRAPH=False, num_warps=WY_WARPS, num_stages=WY_STAGES,
    )  # fmt: skip
    return dq, dk, dv2, db, dg, dA


def kda_bwd(ctx, do, dht):
    """(dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0) for the output gradients do [B, T, HV, V]
    and dht (the final state's gradient, or None)."""
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
        dh, dh0, dv = chunk_gated_delta_rule_bwd_dhu(
            q=qg, k=kg, w=w, gk=gc, h0=h0, dht=dht, do=do, dv=dv, scale=scale, cu_seqlens=cu,
            chunk_size=CHUNK, chunk_indices=chunk_indices, state_v_first=svf,
        )  # fmt: skip
        dq, dk, dv, db, dg, dAkk = _wy_dqkg(
            q, k, v, v_new, gc, beta, Akk, h, do, dh, dv, scale, cu, chunk_indices
        )
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
