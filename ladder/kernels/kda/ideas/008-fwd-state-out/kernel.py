"""kda/008 fwd-state-out: the forward's state pass and output fused into one kernel, on kda/007's
backward.

fla 0.6.0's forward with the layer's flags runs the L2 norms, the beta sigmoid, the gate and
its chunk cumsum, the intra-chunk stage (Aqk, Akk, w, u, kg), then the state pass
(``chunk_gated_delta_rule_fwd_h``: writes every chunk's state h and the new values v_new)
and the output (``chunk_gla_fwd_o_gk``: reads h and v_new back). Here the forward is fla's
stages up to the intra-chunk one, called as ``ChunkKDAFunction.forward`` calls them, then
``fwd.fwd_h_o``: one walk over the chunks that writes o from the state it holds, so h and
v_new are never stored (fla's chain with recompute frees both before the backward, which
recomputes them). What the backward reads is what fla's forward saves, in the same order.

The backward is kda/007's (kda/005's chain with kda/005's WY stage and kda/006's
state-gradient launch).
"""

from __future__ import annotations

import torch
from ladder.kernels.kda.ideas.i005 import chain
from ladder.kernels.kda.ideas.i007 import kernel as k7
from ladder.kernels.kda.ideas.i008 import fwd

__all__ = ["CASES", "kda_bwd", "kda_fwd"]

CASES = ("dense", "varlen", "gva", "state", "lower_bound", "neg_eigval")

kda_bwd = k7.kda_bwd


def kda_fwd(q, k, v, g, beta, A_log, dt_bias, scale, initial_state, output_final_state,
            cu_seqlens, lower_bound, safe_gate, allow_neg_eigval):  # fmt: skip
    """fla's forward with the layer's flags (L2 norm, gate and beta sigmoid in the kernel, the
    state V-first) and the fused state pass: (o [B, T, HV, V] in q's dtype, final_state
    [N, HV, V, K] fp32 or None, ctx for kda_bwd).

    q, k: [B, T, H, K]; v: [B, T, HV, V]; g: [B, T, HV, K], the raw gate input; beta:
    [B, T, HV] raw; A_log [HV], dt_bias [HV * K] fp32; initial_state [N, HV, V, K] fp32 or
    None; cu_seqlens [N + 1] int or None. Errors as fla's stages raise them and
    ``fwd.fwd_h_o``'s."""
    from fla.modules.norm.l2norm import l2norm_fwd
    from fla.ops.common.gate import fused_beta_sigmoid
    from fla.ops.kda.chunk_intra import chunk_kda_fwd_intra
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
        w, u, _qg, kg, Aqk, Akk = chunk_kda_fwd_intra(
            q=qn, k=kn, v=v, gk=gc, beta=beta_s, scale=scale, cu_seqlens=cu_seqlens,
            chunk_size=chain.CHUNK, chunk_indices=chunk_indices, safe_gate=safe_gate,
        )  # fmt: skip
        o, ht = fwd.fwd_h_o(
            qn, kg, w, u, gc, Aqk, scale, initial_state, output_final_state, cu_seqlens,
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
