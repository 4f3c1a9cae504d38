"""kda/027 walk-wu: kda/025's chain with fla's forward w/u kernel folded into the state walk.

kda/025's forward (the promoted chain) runs, for the non-safe gate at K <= 128: the L2 norms,
the gate cumsum, kda/022's diagonal-tile kernel (writing qg), fla's off-diagonal/solve kernel,
fla's w/u kernel (w, u and kg) and kda/019's state walk reading qg, kg, w and u. Here the
diagonal kernel also writes kb = k beta 2^g and kg (``intra_fwd.py``), fla's w/u kernel does
not run, and the walk forms u = A (v beta) and w = A kb per chunk itself (``fwd.py``), each
rounded as fla's kernel stores it: the same operands, products and roundings, one launch
and one round trip of w and u through memory fewer.

The saved tensors are kda/025's (the gate cumsum included), so the backward is kda/025's
unchanged. With ``safe_gate`` (fla's intra-chunk stage for the bounded gate) or K above
``fwd.MAX_K`` (128) the forward is kda/025's.

Env knobs: this idea's ``fwd.py`` (KDA_FWDHO27_*); those of the modules it imports (kda/012's
KDA_FWDDIAG_* launch the diagonal kernel, kda/024's ``launch.py`` the solve and the backward,
as in kda/025).
"""

from __future__ import annotations

import torch
from ladder.kernels.kda.ideas.i005 import chain
from ladder.kernels.kda.ideas.i025 import kernel as k25
from ladder.kernels.kda.ideas.i027 import fwd, intra_fwd

__all__ = ["CASES", "STAGES", "kda_bwd", "kda_fwd", "kda_fwd_chain"]

CASES = ("dense", "varlen", "gva", "state", "lower_bound", "neg_eigval")  # kda/025's
STAGES = k25.STAGES  # the backward's and the forward's L2 norm and gate stages


def kda_fwd(q, k, v, g, beta, A_log, dt_bias, scale, initial_state, output_final_state,
            cu_seqlens, lower_bound, safe_gate, allow_neg_eigval):  # fmt: skip
    """(o [B, T, HV, V] in q's dtype, final_state [N, HV, V, K] fp32 or None, ctx for
    kda_bwd). Shapes as family.py gives them; errors as the stages raise them."""
    return kda_fwd_chain(
        q, k, v, g, beta, A_log, dt_bias, scale, initial_state, output_final_state, cu_seqlens,
        lower_bound, safe_gate, allow_neg_eigval, STAGES,
    )  # fmt: skip


def kda_bwd(ctx, do, dht):
    """(dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0) for the output gradients do [B, T, HV, V]
    and dht (the final state's gradient, or None): kda/025's backward, which takes the saved
    gate cumsum; raises ValueError as kda/025's does."""
    return k25.kda_bwd_chain(ctx, do, dht, STAGES)


def kda_fwd_chain(q, k, v, g, beta, A_log, dt_bias, scale, initial_state, output_final_state,
                  cu_seqlens, lower_bound, safe_gate, allow_neg_eigval, st):  # fmt: skip
    """The forward (module docstring) with ``st``'s L2 norm and gate stages; kda/025's
    ``kda_fwd_chain`` with ``st`` for the bounded gate and K above ``fwd.MAX_K``. Saves what
    kda/025's forward saves, in fla's order, and sets ``ctx.gc_saved``."""
    if safe_gate or q.shape[-1] > fwd.MAX_K:
        return k25.kda_fwd_chain(
            q, k, v, g, beta, A_log, dt_bias, scale, initial_state, output_final_state,
            cu_seqlens, lower_bound, safe_gate, allow_neg_eigval, st,
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
        qg, kb, kg, Aqk, Akk = intra_fwd.fwd_intra(
            qn, kn, v, gc, beta_s, scale, cu_seqlens=cu_seqlens, chunk_indices=chunk_indices
        )
        o, ht = fwd.fwd_walk(
            qg, kb, kg, v, beta_s, Akk, gc, Aqk, scale, initial_state, output_final_state,
            cu_seqlens,
        )  # fmt: skip
    # kda/025's saved tensors: fla's, in its order, with the gate cumsum in g_cumsum's slot
    ctx.save_for_backward(
        qn, q_rstd, kn, k_rstd, v, gc, g, beta, beta_s, A_log, dt_bias, Aqk, Akk,
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
    ctx.gc_saved = True
    return o.type_as(q), ht, ctx
