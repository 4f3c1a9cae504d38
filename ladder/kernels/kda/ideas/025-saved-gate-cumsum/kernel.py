"""kda/025 saved-gate-cumsum: kda/024's chain, with the forward's gate cumsum kept for the
backward (as fla keeps its own ``g_cumsum``) instead of computed a second time there.

kda/024's backward starts by running the gate and its chunk-local cumsum again
(``kda_gate_chunk_cumsum_vector_kernel``, 0.57 ms of the 27.17 ms backward at prod on an H100,
``docs/results/profile-kda-024-h100-20261206.txt``). Its forward computed the same fp32
tensor, gc [B, T, HV, K], from the same inputs with the same kernel and launch, and freed it.
Here the forward saves gc in the slot fla's own forward saves ``g_cumsum`` in, and the
backward takes it from there: the backward makes one launch fewer and computes, bit for
bit, what kda/024's computes. Every other stage, launch and operand is kda/024's.

Memory: gc is 4 bytes per element of g (1 GiB at prod, B16 T8192 H16 K128). fla's forward
saves its g_cumsum too, and kda/024's backward held its recomputed gc through the whole
backward, so the peak of a forward+backward does not grow; what grows is what a forward
keeps until its backward (the activation memory of one layer), by that tensor.

The forward keeps gc only where kda/024's chain computed it (K <= 128, ``fwd.MAX_K``); K
above that runs kda/014's forward (fla's stages), and its backward recomputes gc as
kda/024's does.

Env knobs: kda/024's (its ``launch.py`` and the modules it imports).
"""

from __future__ import annotations

import dataclasses

from ladder.kernels.kda.ideas.i024 import kernel as k24

__all__ = ["CASES", "STAGES", "kda_bwd", "kda_bwd_chain", "kda_fwd", "kda_fwd_chain"]

CASES = ("dense", "varlen", "gva", "state", "lower_bound", "neg_eigval")  # kda/024's
STAGES = k24.STAGES
G_CUMSUM_SLOT = 5  # fla's saved-tensor order: q, q_rstd, k, k_rstd, v, g_cumsum, ...


def kda_fwd(q, k, v, g, beta, A_log, dt_bias, scale, initial_state, output_final_state,
            cu_seqlens, lower_bound, safe_gate, allow_neg_eigval):  # fmt: skip
    """kda/024's forward, keeping the gate cumsum: (o [B, T, HV, V] in q's dtype, final_state
    [N, HV, V, K] fp32 or None, ctx for kda_bwd). Shapes as family.py gives them; errors as
    kda/024's stages raise them."""
    return kda_fwd_chain(
        q, k, v, g, beta, A_log, dt_bias, scale, initial_state, output_final_state, cu_seqlens,
        lower_bound, safe_gate, allow_neg_eigval, STAGES,
    )  # fmt: skip


def kda_bwd(ctx, do, dht):
    """(dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0) for the output gradients do [B, T, HV, V]
    and dht (the final state's gradient, or None); raises ValueError as kda/024's does."""
    return kda_bwd_chain(ctx, do, dht, STAGES)


def kda_fwd_chain(q, k, v, g, beta, A_log, dt_bias, scale, initial_state, output_final_state,
                  cu_seqlens, lower_bound, safe_gate, allow_neg_eigval, st):  # fmt: skip
    """kda/024's ``kda_fwd_chain`` with the stages of ``st``; the gate cumsum its
    ``st.gate_cumsum`` returned is saved in ``ctx`` (``ctx.gc_saved`` says so)."""
    made = []

    def gate_cumsum(*args, **kwargs):
        gc = st.gate_cumsum(*args, **kwargs)
        made.append(gc)
        return gc

    o, ht, ctx = k24.kda_fwd_chain(
        q, k, v, g, beta, A_log, dt_bias, scale, initial_state, output_final_state, cu_seqlens,
        lower_bound, safe_gate, allow_neg_eigval, dataclasses.replace(st, gate_cumsum=gate_cumsum),
    )  # fmt: skip
    ctx.gc_saved = len(made) == 1  # K above fwd.MAX_K: fla's forward, no gate stage of ours
    if ctx.gc_saved:
        saved = list(ctx.saved_tensors)
        if saved[G_CUMSUM_SLOT] is not None:
            raise RuntimeError(
                "kda/024's forward filled the g_cumsum slot: this chain would drop it"
            )
        saved[G_CUMSUM_SLOT] = made[0]
        ctx.save_for_backward(*saved)
    return o, ht, ctx


def kda_bwd_chain(ctx, do, dht, st):
    """kda/024's ``kda_bwd_chain`` with the stages of ``st``, its gate cumsum taken from
    ``ctx`` where the forward saved it (``ctx.gc_saved``) and computed as kda/024's where not."""
    if getattr(ctx, "gc_saved", False):
        gc = ctx.saved_tensors[G_CUMSUM_SLOT]

        def gate_cumsum(*_args, **_kwargs):
            return gc

        st = dataclasses.replace(st, gate_cumsum=gate_cumsum)
    return k24.kda_bwd_chain(ctx, do, dht, st)
