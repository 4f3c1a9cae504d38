"""kda/007 wy-lean-dhu-wide: kda/005's WY stage and kda/006's state-gradient launch together.

The chain (kda/005's ``chain.py``: fla's forward, fla's backward stages in fla's order with
kda/003's intra-chunk stage) runs with:

- the state-gradient stage kda/006's ``dhu.bwd_dhu`` (fla's kernel at BV 64, 8 warps,
  3 stages; ``KDA_DHU_*`` knobs);
- the fused WY/dq/dk/dg stage kda/005's ``wy.kda_bwd_wy`` (kda/004's split-K kernel with a
  two-pass epilogue and 32-bit row offsets; ``KDA_WY_*`` knobs, maxnreg included).
"""

from __future__ import annotations

from ladder.kernels.kda.ideas.i005 import chain, wy
from ladder.kernels.kda.ideas.i006 import dhu

__all__ = ["CASES", "kda_bwd", "kda_fwd"]

CASES = ("dense", "varlen", "gva", "state", "lower_bound", "neg_eigval")

kda_fwd = chain.kda_fwd


def kda_bwd(ctx, do, dht):
    """(dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0) for the output gradients do [B, T, HV, V]
    and dht (the final state's gradient, or None)."""
    return chain.kda_bwd_chain(ctx, do, dht, wy.kda_bwd_wy, dhu.bwd_dhu)
