"""The forward's intra-chunk stage of kda/024 (fla's off-diagonal/solve kernel and fla's w/u
kernel at fixed launches, ``i024.launch``) with kda/023's diagonal-tile kernel in place of
kda/022's: the diagonal tiles' rows past the first anchor's range taken by further anchored
passes (kda/017) instead of one column at a time by the exact loop, and qg = q * 2^g written
by the same kernel, as kda/022's writes it.

With ``safe_gate`` the stage is fla's ``chunk_kda_fwd_intra``, autotuned, as in kda/022 and
kda/024: the bounded gate's kernels are fla's.

Env knobs: none of its own. The diagonal kernel is launched at kda/017's knobs
(KDA_FWDDIAG17_BK, KDA_FWDDIAG17_WARPS, KDA_FWDDIAG17_STAGES, read by ``i017.intra_fwd``: BK,
NUM_WARPS, NUM_STAGES below), the solve and w/u at ``i024.launch``'s (KDA_SOLVE_*, KDA_WUF_*).
"""

from __future__ import annotations

import torch
import triton
from ladder.kernels.kda.ideas.i017 import intra_fwd as i17
from ladder.kernels.kda.ideas.i019 import intra_fwd as i19
from ladder.kernels.kda.ideas.i022 import intra_fwd as i22
from ladder.kernels.kda.ideas.i023 import intra_fwd as i23
from ladder.kernels.kda.ideas.i024 import launch

__all__ = ["LIMIT", "RISE", "fwd_intra"]

LIMIT = i17.LIMIT  # the products' range, log2 units (kda/017's value; a test may set it)
RISE = i17.RISE
# the diagonal kernel's launch: kda/017's knobs' values
BK, NUM_WARPS, NUM_STAGES = i17.BK, i17.NUM_WARPS, i17.NUM_STAGES


def fwd_intra(q, k, v, g, beta, scale, cu_seqlens=None, chunk_indices=None, safe_gate=False):
    """(w, u, qg, kg, Aqk, Akk): kda/023's ``intra_fwd.fwd_intra`` with fla's two kernels at
    kda/024's fixed launches.

    q, k: [B, T, H, K] L2-normalised; v: [B, T, HV, V]; g: [B, T, HV, K] fp32 gate cumsum in
    log2 units (chunk 64); beta: [B, T, HV]; scale: float; cu_seqlens [N + 1] with B == 1 and
    chunk_indices [NT, 2] (fla's, for chunk 64) for a packed batch. Returns w, qg, kg
    [B, T, HV, K] and u [B, T, HV, V] in k's / v's dtype (qg's rows past a packed batch's last
    sequence unwritten), Aqk and Akk [B, T, HV, 64] in k's dtype. Raises ValueError for
    mismatched shapes, HV not a multiple of H, a g that is not fp32, or a packed batch without
    chunk_indices (``i019.checked``)."""
    if safe_gate:
        return i22.fwd_intra(q, k, v, g, beta, scale, cu_seqlens, chunk_indices, safe_gate=True)
    q, k, v, g, beta, cu_seqlens, chunk_indices = i19.checked(
        q, k, v, g, beta, cu_seqlens, chunk_indices
    )
    B, T, H, K = k.shape
    HV = v.shape[2]
    BT, BC = i17.BT, i17.BC
    NT = triton.cdiv(T, BT) if cu_seqlens is None else chunk_indices.shape[0]
    Aqk = torch.empty(B, T, HV, BT, device=k.device, dtype=k.dtype)
    Akk = torch.zeros(B, T, HV, BT, device=k.device, dtype=k.dtype)  # the solve writes below
    Akkd = torch.empty(B, T, HV, BC, device=k.device, dtype=torch.float32)
    qg = torch.empty(B, T, HV, K, device=k.device, dtype=k.dtype)
    if NT > 0:
        i23.kda_fwd_diag_kernel[(NT, BT // BC, B * HV)](
            q, k, g, beta, Aqk, Akkd, qg, cu_seqlens, chunk_indices, scale, T, H=H, HV=HV, K=K,
            BK=min(BK, triton.next_power_of_2(K)), BT=BT, BC=BC, LIMIT=LIMIT, RISE=RISE,
            IS_VARLEN=cu_seqlens is not None, num_warps=NUM_WARPS, num_stages=NUM_STAGES,
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
