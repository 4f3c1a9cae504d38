"""kda/023 segments-qg: kda/022 with kda/017's forward diagonal kernel (the rows past the first
anchor's range on further anchored passes) writing qg, in place of kda/012's
(``intra_fwd.fwd_intra``).

The forward is kda/019's chain (``kda_fwd_chain``: kda/014's forward with kda/019's state
pass reading qg) with this idea's intra-chunk stage; the backward is kda/014's.

Env knobs: those of the modules it imports (kda/017's KDA_FWDDIAG17_* launch this idea's
diagonal kernel; kda/019's KDA_FWDHO19_* the state pass).
"""

from __future__ import annotations

from ladder.kernels.kda.ideas.i014 import kernel as k14
from ladder.kernels.kda.ideas.i019 import kernel as k19
from ladder.kernels.kda.ideas.i023 import intra_fwd

__all__ = ["CASES", "kda_bwd", "kda_fwd"]

CASES = ("dense", "varlen", "gva", "state", "lower_bound", "neg_eigval")

kda_bwd = k14.kda_bwd


def kda_fwd(q, k, v, g, beta, A_log, dt_bias, scale, initial_state, output_final_state,
            cu_seqlens, lower_bound, safe_gate, allow_neg_eigval):  # fmt: skip
    """kda/022's forward (kda/019's ``kda_fwd_chain``) with this idea's intra-chunk stage:
    shapes, outputs and errors as kda/022's ``kda_fwd`` gives them."""
    return k19.kda_fwd_chain(
        q, k, v, g, beta, A_log, dt_bias, scale, initial_state, output_final_state, cu_seqlens,
        lower_bound, safe_gate, allow_neg_eigval, intra_fwd.fwd_intra,
    )  # fmt: skip
