"""kda/021 state-qg-wide: kda/019's forward (the state pass reading qg) with kda/020's
backward (the chunk states' recompute at a fixed BV 128, 8 warps).

The two change different stages of kda/014 (the forward's walk and the backward's state
recompute) and save the same tensors for the backward, so their gains should add: this idea
is the one to bench and promote if both stages win, as kda/007 was for kda/005 and kda/006.

Env knobs: those of the modules it imports (019's fwd.py: KDA_FWDHO19_*; 020's fwdh.py:
KDA_FWDH20_*; kda/006's dhu.py: KDA_DHU_*, and the rest of kda/014's).
"""

from __future__ import annotations

from ladder.kernels.kda.ideas.i019 import kernel as k19
from ladder.kernels.kda.ideas.i020 import kernel as k20

__all__ = ["CASES", "kda_bwd", "kda_fwd"]

CASES = ("dense", "varlen", "gva", "state", "lower_bound", "neg_eigval")

kda_fwd = k19.kda_fwd
kda_bwd = k20.kda_bwd
