"""kda/014 intra-reg-cap: kda/012 with the backward's intra-chunk stage launched under a
register cap (``intra.kda_bwd_intra``: kda/003's kernel at ``maxnreg``).

The forward is kda/012's; the backward is kda/013's ``kda_bwd_chain`` (kda/009's chain) with
this idea's intra stage and kda/009's gate tail.

Env knobs: those of the modules it imports, and intra.py's KDA_INTRA14_BK, KDA_INTRA14_WARPS,
KDA_INTRA14_STAGES and KDA_INTRA14_MAXNREG.
"""

from __future__ import annotations

from ladder.kernels.kda.ideas.i009 import gate
from ladder.kernels.kda.ideas.i012 import kernel as k12
from ladder.kernels.kda.ideas.i013 import kernel as k13
from ladder.kernels.kda.ideas.i014 import intra

__all__ = ["CASES", "kda_bwd", "kda_fwd"]

CASES = ("dense", "varlen", "gva", "state", "lower_bound", "neg_eigval")

kda_fwd = k12.kda_fwd


def kda_bwd(ctx, do, dht):
    """(dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0) for the output gradients do [B, T, HV, V]
    and dht (the final state's gradient, or None). Raises ValueError for a ctx saved without
    state_v_first."""
    return k13.kda_bwd_chain(ctx, do, dht, intra.kda_bwd_intra, gate.gate_tail)
