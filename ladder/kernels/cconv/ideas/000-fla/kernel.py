"""cconv/000 fla: fla's own causal_conv1d kernels, as an idea.

The baseline on the board: every other idea is compared with fla inside its own bench run,
and this row shows what fla measures against itself under the same harness (a ratio near 1,
the run-to-run noise floor) and what fraction of the copy ceiling fla reaches.
"""

from __future__ import annotations

from ladder.kernels.cconv import family

__all__ = ["cconv_fwd", "cconv_bwd"]


def cconv_fwd(x, w):
    """fla's forward (family.baseline_fwd): y [B, T, D] in x's dtype."""
    return family.baseline_fwd(x, w)


def cconv_bwd(x, w, dy):
    """fla's backward (family.baseline_bwd): (dx [B, T, D] in x's dtype, dw [D, W] in w's)."""
    return family.baseline_bwd(x, w, dy)
