"""kda/019 fwd-state-qg: kda/014 with the forward's state pass reading the gated queries
qg = q * 2^g, written by the w/u stage, instead of q and the fp32 gate tile.

The backward is kda/014's. The forward is kda/014's (kda/012's chain: fla's stages up to the
intra-chunk one, kda/012's intra-chunk stage, then the fused state pass and output) with two
changes: the intra-chunk stage is ``intra_fwd.fwd_intra`` (kda/012's, its w/u launch given q
so that it writes qg too) and the state pass is ``fwd.fwd_h_o`` (kda/008's walk reading qg).
K above ``fwd.MAX_K`` keeps kda/014's forward as it is (kda/008's stage falls back to fla's
two kernels there, which read q and the gate).

kda/011's ``kda_fwd_chain`` fixes kda/008's state pass in it and stands on its code (records),
so the chain is written out here once more, as ``kda_fwd_chain`` with the intra-chunk stage
passed in (it must return qg) and this idea's state pass, for later ideas to call.

Env knobs: those of the modules it imports, and fwd.py's KDA_FWDHO19_BV, KDA_FWDHO19_WARPS and
KDA_FWDHO19_STAGES.
"""

from __future__ import annotations

import torch
from ladder.kernels.kda.ideas.i005 import chain
from ladder.kernels.kda.ideas.i014 import kernel as k14
from ladder.kernels.kda.ideas.i019 import fwd, intra_fwd

__all__ = ["CASES", "kda_bwd", "kda_fwd", "kda_fwd_chain"]

CASES = ("dense", "varlen", "gva", "state", "lower_bound", "neg_eigval")

kda_bwd = k14.kda_bwd


def kda_fwd(q, k, v, g, beta, A_log, dt_bias, scale, initial_state, output_final_state,
            cu_seqlens, lower_bound, safe_gate, allow_neg_eigval):  # fmt: skip
    """fla's forward with the layer's flags (L2 norm, gate and beta sigmoid in the kernel, the
    state V-first), kda/012's intra-chunk stage writing qg, and the state pass reading it: (o
    [B, T, HV, V] in q's dtype, final_state [N, HV, V, K] fp32 or None, ctx for kda_bwd).

    q, k: [B, T, H, K]; v: [B, T, HV, V]; g: [B, T, HV, K], the raw gate input; beta:
    [B, T, HV] raw; A_log [HV], dt_bias [HV * K] fp32; initial_state [N, HV, V, K] fp32 or
    None; cu_seqlens [N + 1] int or None. Errors as fla's stages raise them, and
    ``intra_fwd.fwd_intra``'s and ``fwd.fwd_h_o``'s."""
    return kda_fwd_chain(
        q, k, v, g, beta, A_log, dt_bias, scale, initial_state, output_final_state, cu_seqlens,
        lower_bound, safe_gate, allow_neg_eigval, intra_fwd.fwd_intra,
    )  # fmt: skip


def kda_fwd_chain(q, k, v, g, beta, A_log, dt_bias, scale, initial_state, output_final_state,
                  cu_seqlens, lower_bound, safe_gate, allow_neg_eigval, intra_stage):  # fmt: skip
    """kda_fwd with ``intra_stage`` for the intra-chunk stage, called as ``intra_stage(qn, kn,
    v, gc, beta, scale, cu_seqlens=, chunk_indices=, safe_gate=)`` -> (w, u, qg, kg, Aqk,
    Akk) with qg = q * 2^g in k's dtype (``intra_fwd.fwd_intra``)."""
    if q.shape[-1] > fwd.MAX_K:
        return k14.kda_fwd(
            q, k, v, g, beta, A_log, dt_bias, scale, initial_state, output_final_state,
            cu_seqlens, lower_bound, safe_gate, allow_neg_eigval,
        )  # fmt: skip
    from fla.modules.norm.l2norm import l2norm_fwd
    from fla.ops.common.gate import fused_beta_sigmoid
    from fla.ops.kda.gate import kda_gate_chunk_cumsum
    from fla.ops.utils.index import prepare_chunk_indices

    # every tensor contiguous, as fla's input guard makes them (the backward reads the saved
    # initial state, A_log and dt_bias as contiguous)
    q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens = (
        t.contiguous() if t is not None else None
        for t in (q, k, v, g, beta, A_log, dt_bias, initial_state, cu_seqlens)
    )
    ctx = chain._Saved()
    with torch.cuda.device(q.device):
        qn, q_rstd = l2norm_fwd(q)
        kn, k_rstd = l2norm_fwd(k)
        beta_s = fused_beta_sigmoid(x=beta, scale=2.0 if allow_neg_eigval else 1.0)
        chunk_indices = None
        if cu_seqlens is not None:
            chunk_indices = prepare_chunk_indices(cu_seqlens=cu_seqlens, chunk_size=chain.CHUNK)
        gc = kda_gate_chunk_cumsum(
            g=g, A_log=A_log, dt_bias=dt_bias, scale=chain.RCP_LN2, chunk_size=chain.CHUNK,
            cu_seqlens=cu_seqlens, chunk_indices=chunk_indices, lower_bound=lower_bound,
        )  # fmt: skip
        w, u, qg, kg, Aqk, Akk = intra_stage(
            qn, kn, v, gc, beta_s, scale, cu_seqlens=cu_seqlens, chunk_indices=chunk_indices,
            safe_gate=safe_gate,
        )  # fmt: skip
        o, ht = fwd.fwd_h_o(
            qg, kg, w, u, gc, Aqk, scale, initial_state, output_final_state, cu_seqlens,
            chain.CHUNK,
        )  # fmt: skip
    # fla's saved tensors, in its order: the gate cumsum, w, u, qg, kg, v_new and h are None
    # there too (recomputed by the backward), and so are the chunk offsets off its graph path
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
