"""The backward intra-chunk stage of chunk KDA: kda/003's kernel, launched under a register
cap so that more of its programs fit on an SM.

kda/003's kernel (``ladder/kernels/kda/ideas/003-intra-anchored-diag/intra.py``: terms,
anchoring and the diagonal's exact fallback) compiles to 168 registers per thread at BK 32
and 2 warps, so the register file holds 6 of its 64-thread programs per SM: 3 warps per
scheduler. Its profile at prod (docs/results/kda-ncu-intra-h200-20261204.txt) is latency
bound: 1.35 instructions issued per cycle per SM, 66% of scheduler cycles with no eligible
warp, 8.8 cycles between a warp's instructions, about half of them waiting on L1TEX loads,
and DRAM at 1.22 TB/s. ``maxnreg`` caps the registers per thread; at 128 an SM holds 8
programs (4 warps per scheduler), at 96 ten. The arithmetic and its order are kda/003's:
only the compiler's register allocation changes (spills, if any, go to local memory).

Shapes, dtypes and outputs as kda/003's ``kda_bwd_intra``.

Env knobs (read once at import):
    KDA_INTRA14_BK       K slice per program (default 32, kda/003's)
    KDA_INTRA14_WARPS    warps per program (default 2, kda/003's)
    KDA_INTRA14_STAGES   software-pipeline stages of the exact loop (default 2, kda/003's)
    KDA_INTRA14_MAXNREG  registers per thread at most (default 128; 0: uncapped, kda/003's
                         launch exactly)
"""

from __future__ import annotations

import os

import torch
import triton
from ladder.kernels.kda.ideas.i003 import intra as i3

BK = int(os.environ.get("KDA_INTRA14_BK", "32"))
NUM_WARPS = int(os.environ.get("KDA_INTRA14_WARPS", "2"))
NUM_STAGES = int(os.environ.get("KDA_INTRA14_STAGES", "2"))
MAXNREG = int(os.environ.get("KDA_INTRA14_MAXNREG", "128"))

__all__ = ["kda_bwd_intra", "kda_bwd_intra_kernel"]

kda_bwd_intra_kernel = i3.kda_bwd_intra_kernel  # the kernel launched (kda/003's)


def kda_bwd_intra(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, cu_seqlens=None, chunk_indices=None):
    """(dq, dk, db, dg) after the intra-chunk terms: kda/003's ``kda_bwd_intra`` at this
    module's BK, warps and stages, under ``maxnreg=MAXNREG`` (none at 0). q, k [B, T, H, K]
    bf16; g [B, T, HV, K] fp32 chunk-local cumulative gate in log2 units; beta [B, T, HV];
    dAqk, dAkk [B, T, HV, 64] fp32; dq, dk, dg [B, T, HV, K] fp32; db beta's shape fp32.
    chunk_indices is required with cu_seqlens (fla's prepare_chunk_indices(cu_seqlens, 64))."""
    B, T, H, Kd = k.shape
    HV = g.shape[2]
    NK = triton.cdiv(Kd, BK)
    NC = i3.BT // i3.BC
    NT = triton.cdiv(T, i3.BT) if cu_seqlens is None else len(chunk_indices)
    dq2, dk2 = torch.empty_like(dq), torch.empty_like(dk)
    dg2 = torch.empty_like(dg, dtype=torch.float32)
    db2 = torch.empty((NK, *beta.shape), dtype=torch.float32, device=beta.device)
    launch = dict(num_warps=NUM_WARPS, num_stages=NUM_STAGES)
    if MAXNREG > 0:
        launch["maxnreg"] = MAXNREG
    kda_bwd_intra_kernel[(NK * NC * NT, B * HV)](
        q, k, g, beta, dAqk, dAkk, dq, dk, dg, dq2, dk2, dg2, db2, cu_seqlens, chunk_indices,
        T, B * T, H=H, HV=HV, K=Kd, BT=i3.BT, BC=i3.BC, BK=BK, NC=NC, NK=NK,
        IS_VARLEN=cu_seqlens is not None, DIAG_RANGE=i3.DIAG_RANGE, **launch,
    )  # fmt: skip
    return dq2, dk2, db2.sum(0).add_(db), dg2
