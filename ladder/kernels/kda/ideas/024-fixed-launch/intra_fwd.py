"""The forward's intra-chunk stage of kda/022 with fla's two kernels in it (the off-diagonal
tiles and solve, and the w/u kernel) at fixed launches (``launch.py``) instead of through
fla's autotuner. kda/022's diagonal-tile kernel (writing qg) is launched as kda/022 launches
it, at kda/012's KDA_FWDDIAG_* knobs. With ``safe_gate`` the stage is fla's
``chunk_kda_fwd_intra``, autotuned, as in kda/022: the bounded gate's kernels are fla's.

Env knobs: none of its own (launch.py's KDA_SOLVE_* and KDA_WUF_*, kda/012's KDA_FWDDIAG_*).
"""

from __future__ import annotations

import torch
import triton
from ladder.kernels.kda.ideas.i012 import intra_fwd as i12
from ladder.kernels.kda.ideas.i019 import intra_fwd as i19
from ladder.kernels.kda.ideas.i022 import intra_fwd as i22
from ladder.kernels.kda.ideas.i024 import launch

__all__ = ["fwd_intra"]


def fwd_intra(q, k, v, g, beta, scale, cu_seqlens=None, chunk_indices=None, safe_gate=False):
    """(w, u, qg, kg, Aqk, Akk) as kda/022's ``intra_fwd.fwd_intra`` returns them, the same
    kernels at fla's prod picks. Shapes, dtypes and errors: kda/022's (``i019.checked``)."""
    if safe_gate:
        return i22.fwd_intra(q, k, v, g, beta, scale, cu_seqlens, chunk_indices, safe_gate=True)
    q, k, v, g, beta, cu_seqlens, chunk_indices = i19.checked(
        q, k, v, g, beta, cu_seqlens, chunk_indices
    )
    B, T, H, K = k.shape
    HV = v.shape[2]
    BT, BC = i12.BT, i12.BC
    NT = triton.cdiv(T, BT) if cu_seqlens is None else chunk_indices.shape[0]
    Aqk = torch.empty(B, T, HV, BT, device=k.device, dtype=k.dtype)
    Akk = torch.zeros(B, T, HV, BT, device=k.device, dtype=k.dtype)  # the solve writes below
    Akkd = torch.empty(B, T, HV, BC, device=k.device, dtype=torch.float32)
    qg = torch.empty(B, T, HV, K, device=k.device, dtype=k.dtype)
    if NT > 0:
        i22.kda_fwd_diag_kernel[(NT, BT // BC, B * HV)](
            q, k, g, beta, Aqk, Akkd, qg, cu_seqlens, chunk_indices, scale, T, H=H, HV=HV, K=K,
            BK=min(i22.BK, triton.next_power_of_2(K)), BT=BT, BC=BC, LIMIT=i22.LIMIT,
            IS_VARLEN=cu_seqlens is not None, num_warps=i22.NUM_WARPS, num_stages=i22.NUM_STAGES,
        )  # fmt: skip
        launch.solve_launch(
            (NT, B * HV), q=q, k=k, g=g, beta=beta, Aqk=Aqk, Akkd=Akkd, Akk=Akk, scale=scale,
            cu_seqlens=cu_seqlens, chunk_indices=chunk_indices, T=T, H=H, HV=HV, K=K, BT=BT,
            BC=BC, NC=BT // BC, USE_SAFE_GATE=False, USE_GRAPH=False,
        )  # fmt: skip
    w, u, _, kg = launch.w_u(
        k, v, beta, Akk, g, q=None, cu_seqlens=cu_seqlens, chunk_indices=chunk_indices
    )
    return w, u, qg, kg, Aqk, Akk
