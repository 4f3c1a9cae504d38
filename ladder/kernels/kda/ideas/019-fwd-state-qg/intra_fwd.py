"""The forward's intra-chunk stage of kda/012 (kda/014's forward), asked for the gated queries
too: (w, u, qg, kg, Aqk, Akk) with qg = q * 2^g [B, T, HV, K] in k's dtype.

kda/012's ``fwd_intra`` runs its diagonal-tile kernel (``kda_fwd_diag_kernel``), fla 0.6.0's
off-diagonal/solve kernel, then fla's ``recompute_w_u_fwd`` without q (qg None). Here the same
three launches run on the same buffers, the last one given q, so fla's w/u kernel also
writes qg (its ``STORE_QG`` path, the one fla's own backward and ``disable_recompute`` take):
q is read and qg written once, in the kernel that already reads the gate tile. With
``safe_gate``, fla's ``chunk_kda_fwd_intra`` runs as kda/012 runs it, with
``disable_recompute=True``, which is its way of asking for qg (nothing else of that flag is
used here: the caller keeps nothing more for the backward).

Env knobs: kda/012's (``i012.intra_fwd``: KDA_FWDDIAG_BK, KDA_FWDDIAG_WARPS,
KDA_FWDDIAG_STAGES); none of its own.
"""

from __future__ import annotations

import torch
import triton
from ladder.kernels.kda.ideas.i012 import intra_fwd as i12

__all__ = ["LIMIT", "checked", "fwd_intra"]

LIMIT = i12.LIMIT  # the diagonal kernel's anchored range (kda/012's value; a test may set it)


def checked(q, k, v, g, beta, cu_seqlens, chunk_indices):
    """The stage's inputs, contiguous, after kda/012's checks (ValueError naming what does not
    fit): q, k [B, T, H, K]; v [B, T, HV, V]; g [B, T, HV, K] fp32; beta [B, T, HV]; HV a
    multiple of H; chunk_indices given with cu_seqlens."""
    B, T, H, K = k.shape
    HV = v.shape[2]
    if q.shape != k.shape or v.shape[:2] != (B, T) or g.shape != (B, T, HV, K):
        raise ValueError(
            f"fwd_intra: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}, g "
            f"{tuple(g.shape)} do not fit q, k [B, T, H, K], v [B, T, HV, V], g [B, T, HV, K]"
        )
    if beta.shape != (B, T, HV):
        raise ValueError(f"fwd_intra: beta {tuple(beta.shape)} is not [B, T, HV] = {(B, T, HV)}")
    if HV % H:
        raise ValueError(f"fwd_intra: HV = {HV} value heads is not a multiple of H = {H}")
    if g.dtype != torch.float32:
        raise ValueError(f"fwd_intra: g must be the fp32 gate cumsum, got {g.dtype}")
    if cu_seqlens is not None and chunk_indices is None:
        raise ValueError("fwd_intra: a packed batch (cu_seqlens) needs fla's chunk_indices")
    q, k, v, g, beta = (t.contiguous() for t in (q, k, v, g, beta))
    if cu_seqlens is not None:
        cu_seqlens, chunk_indices = cu_seqlens.contiguous(), chunk_indices.contiguous()
    return q, k, v, g, beta, cu_seqlens, chunk_indices


def fwd_intra(q, k, v, g, beta, scale, cu_seqlens=None, chunk_indices=None, safe_gate=False):
    """(w, u, qg, kg, Aqk, Akk): kda/012's ``fwd_intra`` with qg written as well.

    q, k: [B, T, H, K] L2-normalised; v: [B, T, HV, V]; g: [B, T, HV, K] fp32 gate cumsum in
    log2 units (chunk 64); beta: [B, T, HV]; scale: float; cu_seqlens [N + 1] with B == 1 and
    chunk_indices [NT, 2] (fla's, for chunk 64) for a packed batch. Returns w, qg, kg
    [B, T, HV, K] and u [B, T, HV, V] in k's / v's dtype, Aqk and Akk [B, T, HV, 64] in k's
    dtype. Raises ValueError for mismatched shapes, HV not a multiple of H, a g that is not
    fp32, or a packed batch without chunk_indices (kda/012's checks)."""
    from fla.ops.kda.chunk_intra import chunk_kda_fwd_intra, chunk_kda_fwd_kernel_inter_solve_fused
    from fla.ops.kda.wy_fast import recompute_w_u_fwd

    if safe_gate:
        return chunk_kda_fwd_intra(
            q=q, k=k, v=v, gk=g, beta=beta, scale=scale, cu_seqlens=cu_seqlens,
            chunk_size=i12.BT, chunk_indices=chunk_indices, safe_gate=True,
            disable_recompute=True,
        )  # fmt: skip
    q, k, v, g, beta, cu_seqlens, chunk_indices = checked(
        q, k, v, g, beta, cu_seqlens, chunk_indices
    )
    B, T, H, K = k.shape
    HV = v.shape[2]
    BT, BC = i12.BT, i12.BC
    NT = triton.cdiv(T, BT) if cu_seqlens is None else chunk_indices.shape[0]
    Aqk = torch.empty(B, T, HV, BT, device=k.device, dtype=k.dtype)
    Akk = torch.zeros(B, T, HV, BT, device=k.device, dtype=k.dtype)  # the solve writes below
    Akkd = torch.empty(B, T, HV, BC, device=k.device, dtype=torch.float32)
    if NT > 0:
        i12.kda_fwd_diag_kernel[(NT, BT // BC, B * HV)](
            q, k, g, beta, Aqk, Akkd, cu_seqlens, chunk_indices, scale, T, H=H, HV=HV, K=K,
            BK=min(i12.BK, triton.next_power_of_2(K)), BT=BT, BC=BC, LIMIT=LIMIT,
            IS_VARLEN=cu_seqlens is not None, num_warps=i12.NUM_WARPS,
            num_stages=i12.NUM_STAGES,
        )  # fmt: skip
        chunk_kda_fwd_kernel_inter_solve_fused[(NT, B * HV)](
            q=q, k=k, g=g, beta=beta, Aqk=Aqk, Akkd=Akkd, Akk=Akk, scale=scale,
            cu_seqlens=cu_seqlens, chunk_indices=chunk_indices, T=T, H=H, HV=HV, K=K, BT=BT,
            BC=BC, NC=BT // BC, USE_SAFE_GATE=False, USE_GRAPH=False,
        )  # fmt: skip
    w, u, qg, kg = recompute_w_u_fwd(
        k=k, v=v, beta=beta, A=Akk, q=q, gk=g, cu_seqlens=cu_seqlens,
        chunk_indices=chunk_indices,
    )  # fmt: skip
    return w, u, qg, kg, Aqk, Akk
