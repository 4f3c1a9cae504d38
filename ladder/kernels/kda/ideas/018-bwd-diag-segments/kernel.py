"""kda/018 bwd-diag-segments: kda/017 with the backward's intra-chunk stage taking its deep
diagonal tiles (gate range past kda/003's DIAG_RANGE) in a second launch, as anchored
products over segments of rows, instead of kda/003's in-kernel exact serial loops
(``intra.kda_bwd_intra``); the first launch is kda/003's kernel under kda/014's register cap.

The forward is kda/017's; the backward is kda/013's ``kda_bwd_chain`` (kda/009's chain) with
this idea's intra stage and kda/009's gate tail.

Env knobs: those of the modules it imports, and intra.py's KDA_INTRA18_BK, KDA_INTRA18_WARPS,
KDA_INTRA18_STAGES, KDA_INTRA18_MAXNREG, KDA_INTRA18_DEEP_WARPS and KDA_INTRA18_DEEP_PROGRAMS.
"""

from __future__ import annotations

from ladder.kernels.kda.ideas.i009 import gate
from ladder.kernels.kda.ideas.i013 import kernel as k13
from ladder.kernels.kda.ideas.i017 import kernel as k17
from ladder.kernels.kda.ideas.i018 import intra

__all__ = ["CASES", "kda_bwd", "kda_fwd"]

CASES = ("dense", "varlen", "gva", "state", "lower_bound", "neg_eigval")

kda_fwd = k17.kda_fwd


def kda_bwd(ctx, do, dht):
    """(dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0) for the output gradients do [B, T, HV, V]
    and dht (the final state's gradient, or None). Raises ValueError for a ctx saved without
    state_v_first."""
    return k13.kda_bwd_chain(ctx, do, dht, intra.kda_bwd_intra, gate.gate_tail)
