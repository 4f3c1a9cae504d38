"""kda/000 fla: fla's own chunk_kda forward and backward, as an idea.

The baseline on the board: every other idea is compared with fla inside its own bench run;
this row shows fla against itself under the same harness (the noise floor) and what fraction
of the copy ceiling fla reaches.
"""

from __future__ import annotations

from ladder.kernels.kda import family

__all__ = ["CASES", "kda_bwd", "kda_fwd"]

CASES = tuple(family.CASES)
kda_fwd = family.BASELINE.kda_fwd
kda_bwd = family.BASELINE.kda_bwd
