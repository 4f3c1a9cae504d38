"""The forward's intra-chunk stage of chunk KDA with the diagonal 16 x 16 tiles of both
score matrices as anchored tensor-core products, one program per 16-token sub-chunk.

fla 0.6.0's ``chunk_kda_fwd_intra`` with the non-safe gate runs three launches:
``chunk_kda_fwd_kernel_intra_token_parallel`` (the diagonal tiles, one program per token,
one exp2 per (pair, K column): 136 x K per sub-chunk), ``chunk_kda_fwd_kernel_inter_solve_fused``
(the off-diagonal tiles and the solve) and ``recompute_w_u_fwd`` (w, u, kg). ``fwd_intra``
here runs the first as ``kda_fwd_diag_kernel`` and the other two as fla's own kernels, on the
same buffers in the same layouts (the diagonal tiles of Aqk in Aqk, those of A in an fp32
[B, T, HV, 16] buffer).

Per sub-chunk of rows i (first row a) and value head, with g the chunk-local gate cumsum in
log2 units, beta the row scale and s the attention scale:

    Aqk[i, j] = s sum_k q_ik k_jk 2^(g_ik - g_jk)          j <= i (0 above)
    A[i, j]   = beta_i sum_k k_ik k_jk 2^(g_ik - g_jk)     j < i  (0 elsewhere)

with 2^(g_i - g_j) = 2^(g_i - g_a) 2^(g_a - g_j): two exp2 per token and column (32 x K per
sub-chunk), then [16, K] x [K, 16] products in tf32x3 (fp32-accurate, as fla's per-pair
sums are fp32). The first anchor is the sub-chunk's first row, which depends on no later
token.

Range: each factor stays inside 2^(+-LIMIT) (LIMIT 112 log2 units, 77.6 nat, keeps a
factor's tf32x3 low part a normal number and the sums far from fp32's 2^128). The layer's
default (non-safe) gate can fall past 80 nat in 16 tokens, so one anchor per sub-chunk does
not reach every row. kda/012 took the rows past the first anchor's range by an exact loop
(one exp2 per pair and column); here they take further anchored
passes instead. The sub-chunk's rows split into segments [a, b): a segment's anchor a is the
first row past the previous segment's range, and its rows are those up to the first whose
exponent g_i - g_a leaves [-LIMIT, RISE] in some column (the first segment: [-LIMIT,
LIMIT], kda/012's range). A pass computes every pair with the segment's anchor and stores
the segment's rows; for j < a the column factor 2^(g_a - g_j) is at most 2^RISE when the gate
did not rise past RISE since row j (a non-increasing gate, fp32 rounding of its cumulative
sum included, never does), so the products stay finite and a product lost to underflow is
below 2^(RISE - 126). Factors of rows before the anchor and of columns past the segment are
clipped at 2^LIMIT; their entries are not stored. A segment whose earlier columns break
that bound (a gate rising by more than RISE log2 units inside a sub-chunk), and a NaN gate,
send the rows from its anchor on to kda/012's exact loop. Which pass a row takes depends on
rows <= i only, so no later gate leaks into a row through rounding. No gate depth
overflows; a gate falling by d log2 units in 16 tokens needs about 1 + d / LIMIT passes.

Shapes: q, k [B, T, H, K] (L2-normalised; bf16/fp16/fp32); v [B, T, HV, V]; g
[B, T, HV, K] fp32; beta [B, T, HV]; HV a multiple of H. A packed batch has B == 1,
cu_seqlens [N + 1] and fla's chunk_indices [NT, 2]. Chunk size 64, sub-chunk 16.

The products walk K in blocks of BK columns, two [16, BK] x [BK, 16] tf32x3 products per
block into two [16, 16] fp32 accumulators. All of K in one block does not fit: at K 128 a
static sm90 compile takes 255 registers and 224 bytes of stack per thread at 4 warps (the
M = 16 product operand is replicated in every warp), and kda/012's at BK 16, 1 warp takes 98
registers and no stack, 19 programs per SM (kda/012's NOTES.md has the launch sweep).

Env knobs: KDA_FWDDIAG17_BK (K block, a power of two >= 16, default 32), KDA_FWDDIAG17_WARPS
(warps per program, default 1), KDA_FWDDIAG17_STAGES (the K loop's pipeline stages, default
1). BK and warps are kda/014's record's values of kda/012's knobs; stages differ: a static
sm90 compile at BK 32, 1 warp takes 168 registers (12 programs per SM, kda/012's) at 1
stage and 235 (8 per SM) at 2, the pipelined K loop nested in the passes' loop
(`tools/kda_wy_sass.py 017 --stage fwddiag`).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

BK = int(os.environ.get("KDA_FWDDIAG17_BK", "32"))
NUM_WARPS = int(os.environ.get("KDA_FWDDIAG17_WARPS", "1"))
NUM_STAGES = int(os.environ.get("KDA_FWDDIAG17_STAGES", "1"))

BT = 64
BC = 16
LIMIT = 112.0
RISE = 1.0

__all__ = ["BC", "BT", "LIMIT", "RISE", "fwd_intra"]


@triton.jit(do_not_specialize=["T"])
def kda_fwd_diag_kernel(
    q, k, g, beta, Aqk, Akkd, cu_seqlens, chunk_indices, scale, T,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, BK: tl.constexpr, BT: tl.constexpr,
    BC: tl.constexpr, LIMIT: tl.constexpr, RISE: tl.constexpr, IS_VARLEN: tl.constexpr,
):  # fmt: skip
    """One program: sub-chunk i_i of chunk i_t (of batch row i_b, or of chunk_indices' list),
    value head i_hv. Writes the sub-chunk's diagonal tile of Aqk (scaled, 0 above the
    diagonal) and of A into Akkd (fp32, strictly lower, 0 elsewhere), one anchored segment
    of rows per pass, and the rows no segment may take by the exact loop."""
    i_t, i_i, i_bh = tl.program_id(0).to(tl.int64), tl.program_id(1), tl.program_id(2)
    i_b, i_hv = (i_bh // HV).to(tl.int64), i_bh % HV
    i_h = i_hv // (HV // H)
    if IS_VARLEN:
        i_n = tl.load(chunk_indices + i_t * 2).to(tl.int64)
        i_t = tl.load(chunk_indices + i_t * 2 + 1).to(tl.int64)
        bos = tl.load(cu_seqlens + i_n).to(tl.int64)
        eos = tl.load(cu_seqlens + i_n + 1).to(tl.int64)
    else:
        bos = i_b * T
        eos = bos + T
    L = eos - bos
    i0 = i_t * BT + i_i * BC
    if i0 >= L:
        return

    SQK: tl.constexpr = H * K
    SG: tl.constexpr = HV * K
    # the bases at the sub-chunk's first row, so the tiles' offsets are int32: kda/012's
    # 64-bit address tensors, kept live across the passes, cost registers (a static sm90
    # compile at BK 32, 1 warp, 2 stages: 254 with them, 235 with these)
    q += (bos + i0) * SQK + i_h * K
    k += (bos + i0) * SQK + i_h * K
    g += (bos + i0) * SG + i_hv * K
    beta += (bos + i0) * HV + i_hv
    Aqk += (bos + i0) * (HV * BT) + i_hv * BT
    Akkd += (bos + i0) * (HV * BC) + i_hv * BC

    o_i = tl.arange(0, BC)
    n_r = tl.minimum(BC, L - i0).to(tl.int32)  # rows of this sub-chunk
    m_r = o_i < n_r
    b_b = tl.load(beta + o_i * HV, mask=m_r, other=0.0).to(tl.float32)

    # One pass per segment [a, nxt) of rows: anchor a, and nxt the first later row whose
    # exponent leaves the segment's range (n_r for none). ex: the first row of the exact
    # loop (BC for none), set when a segment cannot start at a.
    a = tl.zeros([], dtype=tl.int32)
    ex = tl.full([], BC, dtype=tl.int32)
    while a < n_r:
        # the row exponents' upper bound: the first segment allows +-LIMIT (012's range); a
        # later one, whose columns before the anchor must sit at most RISE below it (checked
        # below), allows rows at most RISE above it, so no product of a row factor and an
        # underflowed column factor can exceed 2^(RISE - 126)
        hi = tl.where(a == 0, LIMIT, RISE)
        b_aq = tl.zeros([BC, BC], dtype=tl.float32)
        b_ak = tl.zeros([BC, BC], dtype=tl.float32)
        b_out = tl.zeros([BC], dtype=tl.int32)  # row leaves [-LIMIT, hi] in some column (NaN too)
        b_low = tl.zeros([BC], dtype=tl.int32)  # row > RISE below the anchor somewhere (NaN too)
        for i_k in range(0, tl.cdiv(K, BK)):
            o_k = i_k * BK + tl.arange(0, BK)
            m_k = o_k < K
            m_rk = m_r[:, None] & m_k[None, :]
            b_q = tl.load(q + o_i[:, None] * SQK + o_k[None, :], mask=m_rk, other=0.0)
            b_k = tl.load(k + o_i[:, None] * SQK + o_k[None, :], mask=m_rk, other=0.0)
            b_g = tl.load(g + o_i[:, None] * SG + o_k[None, :], mask=m_rk, other=0.0)
            b_ga = tl.load(g + a * SG + o_k, mask=m_k, other=0.0)  # the anchor row
            b_x = tl.where(m_rk, b_g - b_ga[None, :], 0.0)
            # factors clipped at 2^LIMIT: only rows before the anchor and columns past the
            # segment reach the clip, and their entries are not stored (select, not scale)
            b_er = tl.exp2(tl.where(b_x > LIMIT, LIMIT, b_x))
            b_kt = tl.trans(b_k.to(tl.float32) * tl.exp2(-tl.where(b_x < -LIMIT, -LIMIT, b_x)))
            b_aq += tl.dot(b_q.to(tl.float32) * b_er, b_kt, input_precision="tf32x3")
            b_ak += tl.dot(b_k.to(tl.float32) * b_er, b_kt, input_precision="tf32x3")
            m_nan = b_x != b_x
            b_out |= tl.max(((b_x < -LIMIT) | (b_x > hi) | m_nan).to(tl.int32), axis=1)
            b_low |= tl.max(((b_x < -RISE) | m_nan).to(tl.int32), axis=1)
        m_after = (o_i >= a) & m_r
        nxt = tl.min(tl.where(m_after & (b_out > 0), o_i, n_r), axis=0).to(tl.int32)
        # a later segment's columns before its anchor must sit at most RISE below it (a
        # non-increasing gate's do, rounding included); an anchor out of its own range
        # (LIMIT < 0) ends the segments too
        stop = (nxt == a) | (tl.max(tl.where(o_i < a, b_low, 0), axis=0) > 0)
        m_s = m_after & (o_i < tl.where(stop, a, nxt))
        m_le = o_i[None, :] <= o_i[:, None]
        m_lt = o_i[None, :] < o_i[:, None]
        p_aq = Aqk + o_i[:, None] * (HV * BT) + (i_i * BC + o_i)[None, :]
        p_ak = Akkd + o_i[:, None] * (HV * BC) + o_i[None, :]
        tl.store(p_aq, tl.where(m_le, b_aq * scale, 0.0).to(Aqk.dtype.element_ty),
                 mask=m_s[:, None])  # fmt: skip
        tl.store(p_ak, tl.where(m_lt, b_ak * b_b[:, None], 0.0), mask=m_s[:, None])
        ex = tl.where(stop, a, ex)
        a = tl.where(stop, n_r, nxt)

    # the rows from ex on: exact, one exp2 per pair and column (fla's arithmetic)
    if ex < n_r:
        m_x = (o_i >= ex) & m_r
        tl.debug_barrier()
        for jj in range(0, n_r):
            c_q = tl.zeros([BC], dtype=tl.float32)
            c_k = tl.zeros([BC], dtype=tl.float32)
            for i_k in range(0, tl.cdiv(K, BK)):
                o_k = i_k * BK + tl.arange(0, BK)
                m_k = o_k < K
                m_e = (m_x & (o_i >= jj))[:, None] & m_k[None, :]
                b_q = tl.load(q + o_i[:, None] * SQK + o_k[None, :], mask=m_e, other=0.0)
                b_k = tl.load(k + o_i[:, None] * SQK + o_k[None, :], mask=m_e, other=0.0)
                b_g = tl.load(g + o_i[:, None] * SG + o_k[None, :], mask=m_e, other=0.0)
                b_kj = tl.load(k + jj * SQK + o_k, mask=m_k, other=0.0).to(tl.float32)
                b_gj = tl.load(g + jj * SG + o_k, mask=m_k, other=0.0)
                b_e = tl.exp2(tl.where(m_e, b_g - b_gj[None, :], -float("inf")))
                b_ke = b_kj[None, :] * b_e
                c_q += tl.sum(b_q.to(tl.float32) * b_ke, axis=1)
                c_k += tl.sum(b_k.to(tl.float32) * b_ke, axis=1)
            m_s = m_x & (o_i >= jj)
            tl.store(Aqk + o_i * (HV * BT) + i_i * BC + jj, (c_q * scale).to(Aqk.dtype.element_ty),
                     mask=m_s)  # fmt: skip
            tl.store(Akkd + o_i * (HV * BC) + jj, tl.where(o_i > jj, c_k * b_b, 0.0), mask=m_s)


def fwd_intra(q, k, v, g, beta, scale, cu_seqlens=None, chunk_indices=None, safe_gate=False):
    """(w, u, qg, kg, Aqk, Akk) as fla 0.6.0's ``chunk_kda_fwd_intra`` returns them (chunk 64,
    disable_recompute=False: qg None). With safe_gate, fla's stage itself runs (its
    tensor-core path for the bounded gate); otherwise the diagonal tiles are this module's
    kernel and the rest fla's two kernels.

    q, k: [B, T, H, K] L2-normalised; v: [B, T, HV, V]; g: [B, T, HV, K] fp32 gate cumsum in
    log2 units (chunk 64); beta: [B, T, HV]; scale: float; cu_seqlens [N + 1] with B == 1
    and chunk_indices [NT, 2] (fla's, for chunk 64) for a packed batch. Returns w, kg
    [B, T, HV, K] and u [B, T, HV, V] in k's / v's dtype, Aqk and Akk [B, T, HV, 64] in k's
    dtype. Raises ValueError for mismatched shapes, HV not a multiple of H, a g that is not
    fp32, or a packed batch without chunk_indices."""
    from fla.ops.kda.chunk_intra import chunk_kda_fwd_intra, chunk_kda_fwd_kernel_inter_solve_fused
    from fla.ops.kda.wy_fast import recompute_w_u_fwd

    if safe_gate:
        return chunk_kda_fwd_intra(
            q=q, k=k, v=v, gk=g, beta=beta, scale=scale, cu_seqlens=cu_seqlens, chunk_size=BT,
            chunk_indices=chunk_indices, safe_gate=True,
        )  # fmt: skip
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
    NT = triton.cdiv(T, BT) if cu_seqlens is None else chunk_indices.shape[0]
    NC = BT // BC
    Aqk = torch.empty(B, T, HV, BT, device=k.device, dtype=k.dtype)
    Akk = torch.zeros(B, T, HV, BT, device=k.device, dtype=k.dtype)  # the solve writes below
    Akkd = torch.empty(B, T, HV, BC, device=k.device, dtype=torch.float32)
    if NT > 0:
        kda_fwd_diag_kernel[(NT, NC, B * HV)](
            q, k, g, beta, Aqk, Akkd, cu_seqlens, chunk_indices, scale, T, H=H, HV=HV, K=K,
            BK=min(BK, triton.next_power_of_2(K)), BT=BT, BC=BC, LIMIT=LIMIT, RISE=RISE,
            IS_VARLEN=cu_seqlens is not None, num_warps=NUM_WARPS,
            num_stages=NUM_STAGES,
        )  # fmt: skip
        chunk_kda_fwd_kernel_inter_solve_fused[(NT, B * HV)](
            q=q, k=k, g=g, beta=beta, Aqk=Aqk, Akkd=Akkd, Akk=Akk, scale=scale,
            cu_seqlens=cu_seqlens, chunk_indices=chunk_indices, T=T, H=H, HV=HV, K=K, BT=BT,
            BC=BC, NC=NC, USE_SAFE_GATE=False, USE_GRAPH=False,
        )  # fmt: skip
    w, u, qg, kg = recompute_w_u_fwd(
        k=k, v=v, beta=beta, A=Akk, q=None, gk=g, cu_seqlens=cu_seqlens,
        chunk_indices=chunk_indices,
    )  # fmt: skip
    return w, u, qg, kg, Aqk, Akk
