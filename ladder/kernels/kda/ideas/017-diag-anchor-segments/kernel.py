"""kda/017 diag-anchor-segments: kda/014 with the forward diagonal tiles' rows past the first
anchor's range taken by further anchored passes (one per segment of rows, each anchored at
its first row) instead of kda/012's exact loop, which stays for gates that rise inside a
sub-chunk (``intra_fwd.kda_fwd_diag_kernel``).

The forward is kda/012's chain (kda/011's ``kda_fwd_chain``) with this idea's intra-chunk
stage; the backward is kda/014's.

Env knobs: those of the modules it imports, and intra_fwd.py's KDA_FWDDIAG17_BK,
KDA_FWDDIAG17_WARPS and KDA_FWDDIAG17_STAGES.
"""

from __future__ import annotations

import functools

from ladder.kernels.kda.ideas.i011 import kernel as k11
from ladder.kernels.kda.ideas.i014 import kernel as k14
from ladder.kernels.kda.ideas.i017 import intra_fwd

__all__ = ["CASES", "kda_bwd", "kda_fwd"]

CASES = ("dense", "varlen", "gva", "state", "lower_bound", "neg_eigval")

kda_bwd = k14.kda_bwd


def kda_fwd(q, k, v, g, beta, A_log, dt_bias, scale, initial_state, output_final_state,
            cu_seqlens, lower_bound, safe_gate, allow_neg_eigval):  # fmt: skip
    """fla's forward with the layer's flags (L2 norm, gate and beta sigmoid in the kernel, the
    state V-first), this idea's intra-chunk stage and kda/008's fused state pass: (o
    [B, T, HV, V] in q's dtype, final_state [N, HV, V, K] fp32 or None, ctx for kda_bwd).

    q, k: [B, T, H, K]; v: [B, T, HV, V]; g: [B, T, HV, K], the raw gate input; beta:
    [B, T, HV] raw; A_log [HV], dt_bias [HV * K] fp32; initial_state [N, HV, V, K] fp32 or
    None; cu_seqlens [N + 1] int or None. Errors as fla's stages raise them, and
    ``intra_fwd.fwd_intra``'s and ``fwd.fwd_h_o``'s."""
    return k11.kda_fwd_chain(
        q, k, v, g, beta, A_log, dt_bias, scale, initial_state, output_final_state, cu_seqlens,
        lower_bound, safe_gate, allow_neg_eigval,
        functools.partial(intra_fwd.fwd_intra, safe_gate=safe_gate),
    )  # fmt: skip
