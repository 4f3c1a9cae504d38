"""kda/006 dhu-wide: kda/004's chain with fla's state-gradient kernel launched at a wider,
fixed configuration.

The chain (kda/005's ``chain.py``: fla's forward, fla's backward stages in fla's order with
kda/003's intra-chunk stage) runs with:

- the state-gradient stage (dh, dh0, the local dv2) ``dhu.bwd_dhu``: fla's own
  ``chunk_gated_delta_rule_bwd_kernel_dhu_blockdim64`` launched directly at BV 64, 8 warps,
  3 stages (``KDA_DHU_*`` knobs) instead of through fla's autotuner, whose list stops at
  4 warps;
- the fused WY/dq/dk/dg stage kda/004's ``wy.kda_bwd_wy`` (``KDA_WY_*`` knobs).
"""

from __future__ import annotations

from ladder.kernels.kda.ideas.i004 import wy
from ladder.kernels.kda.ideas.i005 import chain
from ladder.kernels.kda.ideas.i006 import dhu

__all__ = ["CASES", "kda_bwd", "kda_fwd"]

CASES = ("dense", "varlen", "gva", "state", "lower_bound", "neg_eigval")

kda_fwd = chain.kda_fwd


def kda_bwd(ctx, do, dht):
    """(dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0) for the output gradients do [B, T, HV, V]
    and dht (the final state's gradient, or None)."""
    return chain.kda_bwd_chain(ctx, do, dht, wy.kda_bwd_wy, dhu.bwd_dhu)
