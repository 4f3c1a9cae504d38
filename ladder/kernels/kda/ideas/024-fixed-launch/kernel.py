"""kda/024 fixed-launch: kda/022's chain with every kernel it took through fla's autotuner
launched at a fixed configuration (fla's prod pick on the H200), so a call autotunes
nothing and skips the autotuner's host work.

The kernels and their order are kda/022's (forward: kda/019's chain with kda/022's
intra-chunk stage; backward: kda/014's, which is kda/013's chain with kda/014's intra stage
and kda/009's gate tail). What changes is how fla's kernels in it are launched
(``launch.py``): the L2 norm and its backward, the gate cumsum (forward and the backward's
recompute), the off-diagonal tiles and solve and the forward's w/u (``intra_fwd.py``), the
backward's w/u recompute, dAv, and the backward's recompute of the chunk states.
What still goes through fla's autotuner: K above 128 (kda/014's forward, and fla's wrappers
for the state kernels) and, with ``safe_gate``, the forward's intra-chunk stage (fla's).

The chain is written out here with each stage named in a ``Stages`` record
(``kda_fwd_chain`` / ``kda_bwd_chain``), so a later idea replaces a stage by passing
``dataclasses.replace(STAGES, wy=...)`` instead of copying the chain again.

Env knobs: those of the modules it imports (launch.py's KDA_L2F_*, KDA_L2B_*, KDA_GCS_*,
KDA_SOLVE_*, KDA_WUF_*, KDA_WUB_*, KDA_DAV_*, KDA_FH_*; and kda/022's).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from ladder.kernels.kda.ideas.i005 import chain, wy
from ladder.kernels.kda.ideas.i006 import dhu
from ladder.kernels.kda.ideas.i009 import gate
from ladder.kernels.kda.ideas.i014 import intra
from ladder.kernels.kda.ideas.i014 import kernel as k14
from ladder.kernels.kda.ideas.i019 import fwd
from ladder.kernels.kda.ideas.i024 import intra_fwd, launch

__all__ = ["CASES", "STAGES", "Stages", "kda_bwd", "kda_bwd_chain", "kda_fwd", "kda_fwd_chain"]

CASES = ("dense", "varlen", "gva", "state", "lower_bound", "neg_eigval")


@dataclass(frozen=True)
class Stages:
    """The chain's stages, each called as this idea's defaults are (``STAGES``):
    l2norm_fwd(x) -> (y, rstd); l2norm_bwd(y, rstd, dy) -> dx; gate_cumsum(g, A_log,
    dt_bias, scale, chunk_size, cu_seqlens, chunk_indices, lower_bound) -> fp32 cumsum;
    intra_fwd(qn, kn, v, gc, beta, scale, cu_seqlens=, chunk_indices=, safe_gate=) -> (w, u,
    qg, kg, Aqk, Akk); state_fwd = kda/019's ``fwd.fwd_h_o``; w_u(k, v, beta, A, gk, q=,
    cu_seqlens=, chunk_indices=) -> (w, u, qg, kg); fwd_h(kg, w, u, gk, h0, cu_seqlens,
    chunk_indices, chunk_size) -> (h, v_new); dav(q, k, v, do, A, scale, cu_seqlens,
    chunk_size, chunk_indices) -> (dA, dv); dhu = kda/006's ``dhu.bwd_dhu``; wy = kda/005's
    ``wy.kda_bwd_wy``; intra_bwd = kda/014's ``intra.kda_bwd_intra``; gate_tail = kda/009's
    ``gate.gate_tail``."""

    l2norm_fwd: Callable
    l2norm_bwd: Callable
    gate_cumsum: Callable
    intra_fwd: Callable
    state_fwd: Callable
    w_u: Callable
    fwd_h: Callable
    dav: Callable
    dhu: Callable
    wy: Callable
    intra_bwd: Callable
    gate_tail: Callable


STAGES = Stages(
    l2norm_fwd=launch.l2norm_fwd,
    l2norm_bwd=launch.l2norm_bwd,
    gate_cumsum=launch.gate_cumsum,
    intra_fwd=intra_fwd.fwd_intra,
    state_fwd=fwd.fwd_h_o,
    w_u=launch.w_u,
    fwd_h=launch.fwd_h,
    dav=launch.dav,
    dhu=dhu.bwd_dhu,
    wy=wy.kda_bwd_wy,
    intra_bwd=intra.kda_bwd_intra,
    gate_tail=gate.gate_tail,
)


def kda_fwd(q, k, v, g, beta, A_log, dt_bias, scale, initial_state, output_final_state,
            cu_seqlens, lower_bound, safe_gate, allow_neg_eigval):  # fmt: skip
    """kda/022's forward at fixed launches: (o [B, T, HV, V] in q's dtype, final_state
    [N, HV, V, K] fp32 or None, ctx for kda_bwd). Shapes as family.py gives them; errors as
    the stages raise them."""
    return kda_fwd_chain(
        q, k, v, g, beta, A_log, dt_bias, scale, initial_state, output_final_state, cu_seqlens,
        lower_bound, safe_gate, allow_neg_eigval, STAGES,
    )  # fmt: skip


def kda_bwd(ctx, do, dht):
    """(dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0) for the output gradients do [B, T, HV, V]
    and dht (the final state's gradient, or None). Raises ValueError for a ctx saved without
    state_v_first."""
    return kda_bwd_chain(ctx, do, dht, STAGES)


def kda_fwd_chain(q, k, v, g, beta, A_log, dt_bias, scale, initial_state, output_final_state,
                  cu_seqlens, lower_bound, safe_gate, allow_neg_eigval, st: Stages):  # fmt: skip
    """kda/019's ``kda_fwd_chain`` with the stages of ``st``; K above kda/019's ``fwd.MAX_K``
    runs kda/014's forward (fla's stages, autotuned) as kda/019's does."""
    if q.shape[-1] > fwd.MAX_K:
        return k14.kda_fwd(
            q, k, v, g, beta, A_log, dt_bias, scale, initial_state, output_final_state,
            cu_seqlens, lower_bound, safe_gate, allow_neg_eigval,
        )  # fmt: skip
    from fla.ops.common.gate import fused_beta_sigmoid
    from fla.ops.utils.index import prepare_chunk_indices

    # every tensor contiguous, as fla's input guard makes them (the backward reads the saved
    # initial state, A_log and dt_bias as contiguous)
    q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens = (
        t.contiguous() if t is not None else None
        for t in (q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens)
    )
    ctx = chain._Saved()
    with torch.cuda.device(q.device):
        qn, q_rstd = st.l2norm_fwd(q)
        kn, k_rstd = st.l2norm_fwd(k)
        beta_s = fused_beta_sigmoid(x=beta, scale=2.0 if allow_neg_eigval else 1.0)
        chunk_indices = None
        if cu_seqlens is not None:
            chunk_indices = prepare_chunk_indices(cu_seqlens=cu_seqlens, chunk_size=chain.CHUNK)
        gc = st.gate_cumsum(
            g, A_log, dt_bias, chain.RCP_LN2, chain.CHUNK, cu_seqlens, chunk_indices, lower_bound
        )
        w, u, qg, kg, Aqk, Akk = st.intra_fwd(
            qn, kn, v, gc, beta_s, scale, cu_seqlens=cu_seqlens, chunk_indices=chunk_indices,
            safe_gate=safe_gate,
        )  # fmt: skip
        o, ht = st.state_fwd(
            qg, kg, w, u, gc, Aqk, scale, initial_state, output_final_state, cu_seqlens,
            chain.CHUNK,
        )  # fmt: skip
    # fla's saved tensors, in its order (kda/019's chain saves the same)
    ctx.save_for_backward(
        qn, q_rstd, kn, k_rstd, v, None, g, beta, beta_s, A_log, dt_bias, Aqk, Akk,
        None, None, None, None, None, None, initial_state, cu_seqlens, chunk_indices, None,
    )  # fmt: skip
    ctx.chunk_size, ctx.scale, ctx.lower_bound, ctx.safe_gate = (
        chain.CHUNK,
        scale,
        lower_bound,
        safe_gate,
    )
    ctx.allow_neg_eigval, ctx.state_v_first, ctx.use_graph = allow_neg_eigval, True, False
    ctx.use_qk_l2norm_in_kernel = ctx.use_gate_in_kernel = ctx.use_beta_sigmoid_in_kernel = True
    ctx.disable_recompute, ctx.cp_context = False, None
    return o.type_as(q), ht, ctx


def kda_bwd_chain(ctx, do, dht, st: Stages):
    """kda/013's ``kda_bwd_chain`` with the stages of ``st``. Returns what ``kda_bwd``
    returns; raises ValueError for a ctx saved without state_v_first."""
    from fla.ops.common.gate import fused_beta_sigmoid_bwd

    (q, q_rstd, k, k_rstd, v, _g_cumsum, g_in, beta_raw, beta, A_log, dt_bias, Aqk, Akk,
     *_unused, h0, cu, chunk_indices, _chunk_offsets) = ctx.saved_tensors  # fmt: skip
    lb, scale = ctx.lower_bound, ctx.scale
    if not ctx.state_v_first:
        raise ValueError("the chain's stages read h and dh as [V, K]: it needs state_v_first=True")
    H, HV = q.shape[2], v.shape[2]
    with torch.cuda.device(q.device):
        gc = st.gate_cumsum(g_in, A_log, dt_bias, chain.RCP_LN2, chain.CHUNK, cu, chunk_indices, lb)
        w, u, qg, kg = st.w_u(k, v, beta, Akk, gc, q=q, cu_seqlens=cu, chunk_indices=chunk_indices)
        h, v_new = st.fwd_h(kg, w, u, gc, h0, cu, chunk_indices, chain.CHUNK)
        dAqk, dv = st.dav(q, k, v_new, do, Aqk, scale, cu, chain.CHUNK, chunk_indices)
        dh, dh0, dv = st.dhu(
            qg, kg, w, do, dv, gc, h0, dht, scale, cu_seqlens=cu, chunk_indices=chunk_indices,
            chunk_size=chain.CHUNK,
        )  # fmt: skip
        del w, u, qg, kg  # dead from here: the WY stage's scratch may take their memory
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
