"""kda/005 wy-lean-epilogue: kda/004's chain with its fused WY stage's epilogue in two passes.

The chain (``chain.py``: fla's forward, fla's backward stages in fla's order with kda/003's
intra-chunk stage) runs with the fused WY/dq/dk/dg stage ``wy.kda_bwd_wy``: kda/004's
split-K kernel (the chunk's K split over programs of BK columns, dA and db finished by the
last program of each chunk, no autotuning) with its epilogue in two passes and 32-bit row
offsets (``KDA_WY_*`` knobs: BK, BV, warps, stages, maxnreg). The state-gradient stage is
fla's.
"""

from __future__ import annotations

from ladder.kernels.kda.ideas.i005 import chain, wy

__all__ = ["CASES", "kda_bwd", "kda_fwd"]

CASES = ("dense", "varlen", "gva", "state", "lower_bound", "neg_eigval")

kda_fwd = chain.kda_fwd


def kda_bwd(ctx, do, dht):
    """(dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0) for the output gradients do [B, T, HV, V]
    and dht (the final state's gradient, or None)."""
    return chain.kda_bwd_chain(ctx, do, dht, wy.kda_bwd_wy)
