"""kda/026 segments-fixed: kda/025's chain with kda/023's forward intra-chunk stage (the
diagonal tiles' deep rows on further anchored passes, qg written by the diagonal kernel) at
kda/024's fixed launches.

kda/025 (the promoted chain) runs kda/012's diagonal-tile kernel, whose rows past the first
anchor's range (the gate more than 112 log2 units below the sub-chunk's first row) take an
exact loop one K column at a time. Those rows are 2e-5 of rows at prod, most of them at the
sweep's deep-gate shape, where kda/024's forward ran 0.946x fla on an H100 (record
``024-fixed-launch/20261206T055036Z-e2acc143``). kda/017's kernel takes them by further
anchored passes, each segment of rows anchored at its own first row; kda/023 made it write
qg; this idea launches it with fla's solve and w/u at kda/024's fixed configurations
(``intra_fwd.py``), so the chain still autotunes nothing outside the bounded gate.

Every other stage, launch and operand is kda/025's, the saved gate cumsum included.

Env knobs: those of the modules it imports (kda/017's KDA_FWDDIAG17_* launch the diagonal
kernel; kda/024's ``launch.py`` and kda/019's KDA_FWDHO19_* / kda/008's KDA_FWDHO_* as in
kda/025).
"""

from __future__ import annotations

import dataclasses

from ladder.kernels.kda.ideas.i025 import kernel as k25
from ladder.kernels.kda.ideas.i026 import intra_fwd

__all__ = ["CASES", "STAGES", "kda_bwd", "kda_bwd_chain", "kda_fwd", "kda_fwd_chain"]

CASES = ("dense", "varlen", "gva", "state", "lower_bound", "neg_eigval")  # kda/025's
STAGES = dataclasses.replace(k25.STAGES, intra_fwd=intra_fwd.fwd_intra)
kda_fwd_chain = k25.kda_fwd_chain
kda_bwd_chain = k25.kda_bwd_chain


def kda_fwd(q, k, v, g, beta, A_log, dt_bias, scale, initial_state, output_final_state,
            cu_seqlens, lower_bound, safe_gate, allow_neg_eigval):  # fmt: skip
    """kda/025's forward with this idea's intra-chunk stage: (o [B, T, HV, V] in q's dtype,
    final_state [N, HV, V, K] fp32 or None, ctx for kda_bwd). Shapes as family.py gives them;
    errors as kda/025's stages raise them."""
    return k25.kda_fwd_chain(
        q, k, v, g, beta, A_log, dt_bias, scale, initial_state, output_final_state, cu_seqlens,
        lower_bound, safe_gate, allow_neg_eigval, STAGES,
    )  # fmt: skip


def kda_bwd(ctx, do, dht):
    """(dq, dk, dv, dg, dbeta, dA_log, ddt_bias, dh0) for the output gradients do [B, T, HV, V]
    and dht (the final state's gradient, or None): kda/025's backward (it takes the saved gate
    cumsum); raises ValueError as kda/025's does."""
    return k25.kda_bwd_chain(ctx, do, dht, STAGES)
