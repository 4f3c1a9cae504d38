"""kda/012 fwd-diag-anchored: kda/009 with the forward's diagonal score tiles as anchored
tensor-core products.

The backward is kda/009's. The forward is kda/008's (fla's stages up to the intra-chunk one,
then the fused state pass and output), written out as kda/011's ``kda_fwd_chain``, with the
intra-chunk stage ``intra_fwd.fwd_intra``: fla 0.6.0's ``chunk_kda_fwd_intra`` with its
token-parallel diagonal-tile kernel replaced by ``intra_fwd.kda_fwd_diag_kernel`` (one program per
16-token sub-chunk, two exp2 per token and column, two tf32x3 products, an exact loop for the
rows whose gate range passes the products' limit). With ``safe_gate`` fla's stage runs as it
is. Env knobs: those of the modules it imports (008's ``fwd.py``: the state pass's launch)
and ``intra_fwd.py``'s KDA_FWDDIAG_WARPS.
"""

from __future__ import annotations

import functools

from ladder.kernels.kda.ideas.i009 import kernel as k9
from ladder.kernels.kda.ideas.i011 import kernel as k11
from ladder.kernels.kda.ideas.i012 import intra_fwd

__all__ = ["CASES", "kda_bwd", "kda_fwd"]

CASES = ("dense", "varlen", "gva", "state", "lower_bound", "neg_eigval")

kda_bwd = k9.kda_bwd


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
