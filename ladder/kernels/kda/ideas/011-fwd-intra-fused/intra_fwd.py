"""The forward's intra-chunk stage of chunk KDA in one kernel: both score matrices, the
triangular solve and (by default) w, u and kg.

fla 0.6.0 runs it as three launches per call (``chunk_kda_fwd_intra`` with the non-safe
gate): ``chunk_kda_fwd_kernel_intra_token_parallel`` (one program per token: the diagonal
16 x 16 tiles of both matrices, one exp2 per pair and column), then
``chunk_kda_fwd_kernel_inter_solve_fused`` (the off-diagonal tiles, the solve), then
``recompute_w_u_fwd_kda_kernel`` (w, u, kg). Each reads q, k and the fp32 gate again, and
the diagonal tiles and the inverse make a round trip through memory between them.

Here one program takes one 64-token chunk of one value head. With g the chunk-local gate
cumsum in log2 units (non-increasing in t), E(i, j) = 2^(g_i - g_j) per K column, beta_i the
row scale and s the attention scale:

    Aqk[i, j] = s sum_k q_ik k_jk E_k(i, j)              j <= i, 0 above
    A[i, j]   = beta_i sum_k k_ik k_jk E_k(i, j)         j < i
    Akk       = (I + A)^-1                               lower triangular, 0 above
    w = Akk (k beta 2^g),  u = Akk (v beta),  kg = k 2^(g_last - g)

in fla's layouts and dtypes (Aqk and Akk as the inputs' dtype, [B, T, HV, 64]).

Off-diagonal 16 x 16 tiles (rows of sub-chunk r, keys of an earlier sub-chunk c) are
tensor-core products anchored at r's first row a, E(i, j) = 2^(g_i - g_a) 2^(g_a - g_j),
both factors at most 1 for any gate depth (fla's own anchoring, tf32 as fla's).

Diagonal tiles are tensor-core products too, in tf32x3 (fp32-accurate), anchored at the
tile's first row a: E(i, j) = 2^(g_i - g_a) 2^(g_a - g_j), the row factor at most 1, the key
factor at least 1. The anchor depends on no later row, so row i's scores are computed from
rows <= i alone (no future gate leaks into them through rounding; a midpoint anchor would
read the tile's last row). Each factor is kept inside 2^(+-LIMIT): a row is checked at run
time, and a row whose own exponent, or any earlier row's in the tile, passes LIMIT in any
column of the K block (a gate range past 112 log2 units, 77.6 nat, in 16 tokens: the
non-safe gate at several nat per token) takes an exact loop instead, one exp2 per pair,
each at most 1. The choice is per row, so it too depends on no later row; no gate depth can
overflow. (A fixed shift of the anchor would widen the range the products take, but the
shifted exponent g_i - g_a + D is rounded at D's magnitude: with D = 64 the diagonal scores
lost a factor of 10 in accuracy on the interpreter, so there is none.)

The solve is fla's: forward substitution inside each diagonal tile, then the off-diagonal
blocks of the inverse from products, here in tf32x3 (fla: tf32), so the inverse keeps fp32
accuracy where it grows (beta near 2).

With FUSE_WU (the default) the same program then writes w, u and kg from the inverse it
just stored (read back after a barrier, rounded to the inputs' dtype as fla's stored copy
is); without it, fla's ``recompute_w_u_fwd`` does that in a launch of its own.

Shapes: q, k [B, T, H, K] (L2-normalised, bf16/fp16/fp32); v [B, T, HV, V]; g [B, T, HV, K]
fp32 gate cumsum in log2 units; beta [B, T, HV]; HV a multiple of H. A packed batch has
B == 1, cu_seqlens [N + 1] and fla's chunk_indices [NT, 2]. Chunk size 64.

Env knobs: KDA_FWDINTRA_BK (K block of the score products, a power of two >= 16),
KDA_FWDINTRA_WARPS, KDA_FWDINTRA_FUSE_WU (1: w/u/kg in the same kernel; 0: fla's kernel).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

BK = int(os.environ.get("KDA_FWDINTRA_BK", "16"))
NUM_WARPS = int(os.environ.get("KDA_FWDINTRA_WARPS", "2"))
SOLVE_WARPS = int(os.environ.get("KDA_FWDINTRA_SOLVE_WARPS", "2"))
FUSE_WU = os.environ.get("KDA_FWDINTRA_FUSE_WU", "1") == "1"

BT = 64
BC = 16
WU_BK = 64  # the w/kg and u blocks of the fused tail (fla's recompute_w_u blocks)
WU_BV = 64
# The diagonal tiles' factors 2^(g_i - g_a) and 2^(g_a - g_j) are kept within 2^(+-LIMIT),
# so that a factor's tf32x3 low part (2^-11 below it) stays a normal number and a sum of 16
# products stays far from fp32's 2^128; a row beyond takes the exact loop.
LIMIT = 112.0

__all__ = ["BT", "FUSE_WU", "LIMIT", "fwd_intra"]


@triton.jit
def _rows(ptr, rows, m_r, o_k, m_k, stride):
    """[len(rows), len(o_k)] fp32 tile of a row-major matrix (masked elements 0)."""
    return tl.load(
        ptr + rows[:, None] * stride + o_k[None, :], mask=m_r[:, None] & m_k[None, :], other=0.0
    ).to(tl.float32)


@triton.jit
def _row_block(
    q, k, g, b_kall, b_gall, r: tl.constexpr, t0, L, o_c, o_k, m_k, SQK: tl.constexpr,
    SG: tl.constexpr, BC: tl.constexpr, LIMIT: tl.constexpr,
):  # fmt: skip
    """The [BC, BT] increments of (Aqk, A) of row sub-chunk r for one K block, every column of
    the chunk (those of later sub-chunks 0; the caller masks the upper triangle), and the rows
    whose diagonal-tile factors leave 2^(+-LIMIT) in this block ([BC] int32, 1 for such a
    row). b_kall, b_gall: the chunk's [BT, BK] k and gate rows of the block."""
    o_i = tl.arange(0, BC)
    i0 = t0 + r * BC
    rows = i0 + o_i
    m_r = rows < L
    m_rk = m_r[:, None] & m_k[None, :]
    b_q = _rows(q, rows, m_r, o_k, m_k, SQK)
    b_k = _rows(k, rows, m_r, o_k, m_k, SQK)
    b_g = _rows(g, rows, m_r, o_k, m_k, SG)
    b_ga = tl.load(g + i0 * SG + o_k, mask=m_k, other=0.0)  # the anchor: r's first row
    b_x = tl.where(m_rk, b_g - b_ga[None, :], 0.0)  # row exponents, <= 0
    b_er = tl.where(m_rk, tl.exp2(b_x), 0.0)
    # key factors 2^(g_a - g_j): <= 1 for earlier sub-chunks, >= 1 on the diagonal tile
    m_ck = ((o_c < (r + 1) * BC) & (t0 + o_c < L))[:, None] & m_k[None, :]
    b_kc = tl.where(m_ck, b_kall * tl.exp2(b_ga[None, :] - b_gall), 0.0)
    b_tq = tl.dot(b_q * b_er, tl.trans(b_kc), input_precision="tf32x3")
    b_tk = tl.dot(b_k * b_er, tl.trans(b_kc), input_precision="tf32x3")
    b_bad = (tl.max(tl.where(m_rk, -b_x, 0.0), axis=1) > LIMIT).to(tl.int32)
    return b_tq, b_tk, b_bad


@triton.jit
def _exact_columns(
    q, k, g, Aqk, S, beta, b_bad, r: tl.constexpr, t0, L, scale, K: tl.constexpr,
    BK: tl.constexpr, HV: tl.constexpr, SQK: tl.constexpr, SG: tl.constexpr,
    SA: tl.constexpr, BC: tl.constexpr,
):  # fmt: skip
    """Row sub-chunk r's diagonal tile of Aqk and A, rewritten exactly (one exp2 per pair and
    column, each at most 1) in the rows b_bad marks."""
    o_i = tl.arange(0, BC)
    i0 = t0 + r * BC
    rows = i0 + o_i
    m_r = rows < L
    b_b = tl.load(beta + rows * HV, mask=m_r, other=0.0).to(tl.float32)
    for jj in range(0, tl.minimum(BC, L - i0)):
        c_q = tl.zeros([BC], dtype=tl.float32)
        c_k = tl.zeros([BC], dtype=tl.float32)
        for i_k in range(0, tl.cdiv(K, BK)):
            o_k = i_k * BK + tl.arange(0, BK)
            m_k = o_k < K
            m_e = ((o_i >= jj) & m_r)[:, None] & m_k[None, :]
            b_q = _rows(q, rows, m_r, o_k, m_k, SQK)
            b_k = _rows(k, rows, m_r, o_k, m_k, SQK)
            b_g = _rows(g, rows, m_r, o_k, m_k, SG)
            b_kj = tl.load(k + (i0 + jj) * SQK + o_k, mask=m_k, other=0.0).to(tl.float32)
            b_gj = tl.load(g + (i0 + jj) * SG + o_k, mask=m_k, other=0.0)
            b_ke = b_kj[None, :] * tl.exp2(tl.where(m_e, b_g - b_gj[None, :], -float("inf")))
            c_q += tl.sum(b_q * b_ke, axis=1)
            c_k += tl.sum(b_k * b_ke, axis=1)
        m_s = b_bad & m_r & (o_i >= jj)
        p = rows * SA + r * BC + jj
        tl.store(Aqk + p, (c_q * scale).to(Aqk.dtype.element_ty), mask=m_s)
        tl.store(S + p, tl.where(o_i > jj, c_k * b_b, 0.0), mask=m_s)


@triton.jit
def _tile(ptr, rows, m_r, col0, o_i, stride):
    """[BC, BC] fp32 tile at (rows, col0 ..) of a row-major matrix (masked rows 0)."""
    return tl.load(
        ptr + rows[:, None] * stride + (col0 + o_i)[None, :], mask=m_r[:, None], other=0.0
    ).to(tl.float32)


@triton.jit
def _diag_inverse(S, i0, n, o_i, SS: tl.constexpr, col0):
    """(I + A_cc)^-1 of one diagonal tile by forward substitution (fla's), A_cc the strictly
    lower tile of the scratch S at rows i0 .., columns col0 ..; n the tile's rows in the
    sequence (rows past n keep the identity)."""
    b_ai = -_tile(S, i0 + o_i, o_i < n, col0, o_i, SS)
    for i in range(2, n):
        b_r = -tl.load(S + (i0 + i) * SS + col0 + o_i)
        b_r = tl.where(o_i < i, b_r, 0.0)
        b_r += tl.sum(b_r[:, None] * b_ai, axis=0)
        b_ai = tl.where((o_i == i)[:, None], b_r[None, :], b_ai)
    return b_ai + (o_i[:, None] == o_i[None, :]).to(tl.float32)


@triton.jit
def _dot3(a, b):
    return tl.dot(a, b, input_precision="tf32x3")


@triton.jit
def _store(ptr, rows, m_r, col0, b, o_i, stride):
    tl.store(
        ptr + rows[:, None] * stride + (col0 + o_i)[None, :],
        b.to(ptr.dtype.element_ty),
        mask=m_r[:, None],
    )


@triton.jit
def _store_rows(Aqk, S, beta, b_aq, b_ak, r: tl.constexpr, t0, L, o_c, scale,
                HV: tl.constexpr, SA: tl.constexpr, BC: tl.constexpr):  # fmt: skip
    """Row sub-chunk r's rows of Aqk (scaled, lower triangle, 0 above) and of A (rows times
    beta, strictly lower, 0 elsewhere) into the fp32 scratch S."""
    rows = t0 + r * BC + tl.arange(0, BC)
    m_r = rows < L
    c_le = o_c[None, :] <= (r * BC + tl.arange(0, BC))[:, None]
    c_lt = o_c[None, :] < (r * BC + tl.arange(0, BC))[:, None]
    p = rows[:, None] * SA + o_c[None, :]
    tl.store(Aqk + p, tl.where(c_le, b_aq * scale, 0.0).to(Aqk.dtype.element_ty),
             mask=m_r[:, None])  # fmt: skip
    b_b = tl.load(beta + rows * HV, mask=m_r, other=0.0).to(tl.float32)
    tl.store(S + p, tl.where(c_lt & m_r[:, None], b_ak * b_b[:, None], 0.0), mask=m_r[:, None])


@triton.jit(do_not_specialize=["T"])
def kda_fwd_intra_scores_kernel(
    q, k, g, beta, Aqk, S, cu_seqlens, chunk_indices, scale, T,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr,
    BK: tl.constexpr, LIMIT: tl.constexpr, IS_VARLEN: tl.constexpr,
):  # fmt: skip
    """One program: chunk i_t of batch row i_b (or of chunk_indices' list), value head i_hv.
    Writes that chunk's rows of Aqk and of A (fp32, into S [B, T, HV, BT])."""
    i_t, i_bh = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    i_b, i_hv = i_bh // HV, i_bh % HV
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
    if i_t * BT >= L:
        return

    SQK: tl.constexpr = H * K
    SG: tl.constexpr = HV * K
    SA: tl.constexpr = HV * BT
    q += (bos * H + i_h) * K
    k += (bos * H + i_h) * K
    g += (bos * HV + i_hv) * K
    beta += bos * HV + i_hv
    Aqk += (bos * HV + i_hv) * BT
    S += (bos * HV + i_hv) * BT

    t0 = i_t * BT
    o_c = tl.arange(0, BT)  # the chunk's rows / columns
    m_c = t0 + o_c < L

    # row sub-chunk by row sub-chunk, each over the K blocks (two [BC, BT] accumulators
    # live), reading the key rows up to its own
    for r in tl.static_range(4):
        if t0 + r * BC < L:
            m_cr = m_c & (o_c < (r + 1) * BC)
            b_aq = tl.zeros([BC, BT], dtype=tl.float32)
            b_ak = tl.zeros([BC, BT], dtype=tl.float32)
            b_bad = tl.zeros([BC], dtype=tl.int32)
            for i_k in range(0, tl.cdiv(K, BK)):
                o_k = i_k * BK + tl.arange(0, BK)
                m_k = o_k < K
                b_kall = _rows(k, t0 + o_c, m_cr, o_k, m_k, SQK)
                b_gall = _rows(g, t0 + o_c, m_cr, o_k, m_k, SG)
                a, b, c = _row_block(q, k, g, b_kall, b_gall, r, t0, L, o_c, o_k, m_k, SQK, SG,
                                     BC, LIMIT)  # fmt: skip
                b_aq += a
                b_ak += b
                b_bad |= c
            _store_rows(Aqk, S, beta, b_aq, b_ak, r, t0, L, o_c, scale, HV, SA, BC)
            # a row whose diagonal-tile exponent, or an earlier row's, left +-LIMIT in some
            # column of some block: its diagonal-tile entries are rewritten exactly
            b_bad = tl.cumsum(b_bad, axis=0) > 0
            tl.debug_barrier()
            if tl.max(b_bad.to(tl.int32), axis=0) > 0:
                _exact_columns(q, k, g, Aqk, S, beta, b_bad, r, t0, L, scale, K, BK, HV, SQK,
                               SG, SA, BC)  # fmt: skip


@triton.jit(do_not_specialize=["T"])
def kda_fwd_intra_solve_kernel(
    k, v, g, beta, Akk, S, w, u, kg, cu_seqlens, chunk_indices, T,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
    BC: tl.constexpr, WU_BK: tl.constexpr, WU_BV: tl.constexpr, FUSE_WU: tl.constexpr,
    IS_VARLEN: tl.constexpr,
):  # fmt: skip
    """One program: chunk i_t of batch row i_b (or of chunk_indices' list), value head i_hv.
    Writes that chunk's rows of Akk = (I + A)^-1 from A in S, and of w, u, kg with FUSE_WU."""
    i_t, i_bh = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    i_b, i_hv = i_bh // HV, i_bh % HV
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
    if i_t * BT >= L:
        return

    SQK: tl.constexpr = H * K
    SG: tl.constexpr = HV * K
    SA: tl.constexpr = HV * BT
    k += (bos * H + i_h) * K
    g += (bos * HV + i_hv) * K
    beta += bos * HV + i_hv
    Akk += (bos * HV + i_hv) * BT
    S += (bos * HV + i_hv) * BT
    t0 = i_t * BT
    o_c = tl.arange(0, BT)
    m_c = t0 + o_c < L

    # (I + A)^-1 (fla's solve): the diagonal tiles by substitution, then the blocks below
    o_i = tl.arange(0, BC)
    r0, r1, r2, r3 = t0 + o_i, t0 + BC + o_i, t0 + 2 * BC + o_i, t0 + 3 * BC + o_i
    m0, m1, m2, m3 = r0 < L, r1 < L, r2 < L, r3 < L
    n = L - t0
    i00 = _diag_inverse(S, t0, tl.minimum(BC, n), o_i, SA, 0)
    i11 = _diag_inverse(S, t0 + BC, tl.minimum(BC, n - BC), o_i, SA, BC)
    i22 = _diag_inverse(S, t0 + 2 * BC, tl.minimum(BC, n - 2 * BC), o_i, SA, 2 * BC)
    i33 = _diag_inverse(S, t0 + 3 * BC, tl.minimum(BC, n - 3 * BC), o_i, SA, 3 * BC)
    a10 = _tile(S, r1, m1, 0, o_i, SA)
    i10 = -_dot3(_dot3(i11, a10), i00)
    a20 = _tile(S, r2, m2, 0, o_i, SA)
    a21 = _tile(S, r2, m2, BC, o_i, SA)
    i21 = -_dot3(_dot3(i22, a21), i11)
    i20 = -_dot3(i22, _dot3(a20, i00) + _dot3(a21, i10))
    a30 = _tile(S, r3, m3, 0, o_i, SA)
    a31 = _tile(S, r3, m3, BC, o_i, SA)
    a32 = _tile(S, r3, m3, 2 * BC, o_i, SA)
    i32 = -_dot3(_dot3(i33, a32), i22)
    i31 = -_dot3(i33, _dot3(a31, i11) + _dot3(a32, i21))
    i30 = -_dot3(i33, _dot3(a30, i00) + _dot3(a31, i10) + _dot3(a32, i20))
    zero = tl.zeros([BC, BC], dtype=tl.float32)
    _store(Akk, r0, m0, 0, i00, o_i, SA)
    _store(Akk, r0, m0, BC, zero, o_i, SA)
    _store(Akk, r0, m0, 2 * BC, zero, o_i, SA)
    _store(Akk, r0, m0, 3 * BC, zero, o_i, SA)
    _store(Akk, r1, m1, 0, i10, o_i, SA)
    _store(Akk, r1, m1, BC, i11, o_i, SA)
    _store(Akk, r1, m1, 2 * BC, zero, o_i, SA)
    _store(Akk, r1, m1, 3 * BC, zero, o_i, SA)
    _store(Akk, r2, m2, 0, i20, o_i, SA)
    _store(Akk, r2, m2, BC, i21, o_i, SA)
    _store(Akk, r2, m2, 2 * BC, i22, o_i, SA)
    _store(Akk, r2, m2, 3 * BC, zero, o_i, SA)
    _store(Akk, r3, m3, 0, i30, o_i, SA)
    _store(Akk, r3, m3, BC, i31, o_i, SA)
    _store(Akk, r3, m3, 2 * BC, i32, o_i, SA)
    _store(Akk, r3, m3, 3 * BC, i33, o_i, SA)

    if FUSE_WU:
        # w, u, kg from the inverse as stored (the inputs' dtype, as fla's kernel reads it)
        tl.debug_barrier()
        v += (bos * HV + i_hv) * V
        u += (bos * HV + i_hv) * V
        w += (bos * HV + i_hv) * K
        kg += (bos * HV + i_hv) * K
        o_t = t0 + o_c
        b_A = tl.load(Akk + o_t[:, None] * SA + o_c[None, :], mask=m_c[:, None], other=0.0)
        b_b = tl.load(beta + o_t * HV, mask=m_c, other=0.0).to(tl.float32)
        for i_v in range(0, tl.cdiv(V, WU_BV)):
            o_v = i_v * WU_BV + tl.arange(0, WU_BV)
            m_tv = m_c[:, None] & (o_v < V)[None, :]
            p = o_t[:, None] * (HV * V) + o_v[None, :]
            b_v = tl.load(v + p, mask=m_tv, other=0.0).to(tl.float32)
            b_u = tl.dot(b_A, (b_v * b_b[:, None]).to(b_A.dtype))
            tl.store(u + p, b_u.to(u.dtype.element_ty), mask=m_tv)
        last = tl.minimum(t0 + BT, L) - 1
        for i_k in range(0, tl.cdiv(K, WU_BK)):
            o_k = i_k * WU_BK + tl.arange(0, WU_BK)
            m_k = o_k < K
            m_tk = m_c[:, None] & m_k[None, :]
            b_k = tl.load(k + o_t[:, None] * SQK + o_k[None, :], mask=m_tk, other=0.0).to(
                tl.float32
            )
            b_g = tl.load(g + o_t[:, None] * SG + o_k[None, :], mask=m_tk, other=0.0)
            b_gl = tl.load(g + last * SG + o_k, mask=m_k, other=0.0)
            p = o_t[:, None] * SG + o_k[None, :]
            b_w = tl.dot(b_A, (b_k * b_b[:, None] * tl.exp2(b_g)).to(b_A.dtype))
            tl.store(w + p, b_w.to(w.dtype.element_ty), mask=m_tk)
            b_kg = tl.where(m_tk, b_k * tl.exp2(b_gl[None, :] - b_g), 0.0)
            tl.store(kg + p, b_kg.to(kg.dtype.element_ty), mask=m_tk)


def fwd_intra(q, k, v, g, beta, scale, cu_seqlens=None, chunk_indices=None):
    """(w, u, qg, kg, Aqk, Akk) as fla 0.6.0's ``chunk_kda_fwd_intra`` returns them with
    disable_recompute=False (qg None), for either gate form.

    q, k: [B, T, H, K] L2-normalised; v: [B, T, HV, V]; g: [B, T, HV, K] fp32 gate cumsum in
    log2 units (chunk 64); beta: [B, T, HV]; scale: float; cu_seqlens [N + 1] with B == 1
    and chunk_indices [NT, 2] (fla's, for chunk 64) for a packed batch. Returns w, kg
    [B, T, HV, K] and u [B, T, HV, V] in k's / v's dtype, Aqk and Akk [B, T, HV, 64] in k's
    dtype. Raises ValueError for mismatched shapes, HV not a multiple of H, or a packed
    batch without chunk_indices."""
    B, T, H, K = k.shape
    HV, V = v.shape[2], v.shape[3]
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
    Aqk = torch.empty(B, T, HV, BT, device=k.device, dtype=k.dtype)
    Akk = torch.empty(B, T, HV, BT, device=k.device, dtype=k.dtype)
    S = torch.empty(B, T, HV, BT, device=k.device, dtype=torch.float32)  # scratch: A
    if FUSE_WU:
        w = torch.empty(B, T, HV, K, device=k.device, dtype=k.dtype)
        u = torch.empty_like(v)
        kg = torch.empty(B, T, HV, K, device=k.device, dtype=k.dtype)
    else:
        w = u = kg = None
    if NT > 0:
        varlen = cu_seqlens is not None
        kda_fwd_intra_scores_kernel[(NT, B * HV)](
            q, k, g, beta, Aqk, S, cu_seqlens, chunk_indices, scale, T, H=H, HV=HV, K=K, BT=BT,
            BC=BC, BK=BK, LIMIT=LIMIT, IS_VARLEN=varlen, num_warps=NUM_WARPS,
        )  # fmt: skip
        kda_fwd_intra_solve_kernel[(NT, B * HV)](
            k, v, g, beta, Akk, S, w, u, kg, cu_seqlens, chunk_indices, T, H=H, HV=HV, K=K, V=V,
            BT=BT, BC=BC, WU_BK=WU_BK, WU_BV=WU_BV, FUSE_WU=FUSE_WU, IS_VARLEN=varlen,
            num_warps=SOLVE_WARPS,
        )  # fmt: skip
    if not FUSE_WU:
        from fla.ops.kda.wy_fast import recompute_w_u_fwd

        w, u, _qg, kg = recompute_w_u_fwd(
            k=k, v=v, beta=beta, A=Akk, gk=g, cu_seqlens=cu_seqlens, chunk_indices=chunk_indices
        )
    return w, u, None, kg, Aqk, Akk
