"""The backward intra-chunk stage of chunk KDA: every load issued up front, one product per side.

For one 64-token chunk of one value head, with g the chunk-local cumulative gate in log2
units (non-increasing in t), E(i, j) = exp2(g_i - g_j) per K column for j <= i, and the
gradients dAqk, dAkk of the chunk's [64, 64] score matrices (lower triangular; dAkk strictly):

    P_q[i]  = sum_{j <= i} dAqk[i, j] k_j E(i, j)        dq  += P_q
    P_k[i]  = sum_{j <= i} dAkk[i, j] k_j E(i, j)        db  += <P_k[i], k_i>,  dk += beta_i P_k[i]
    dkt[j]  = sum_{i >= j} (dAqk[i, j] q_i + dAkk[i, j] beta_i k_i) E(i, j)     dk += dkt
    dg     += q * P_q + (beta P_k - dkt) * k

A program takes one 16-token sub-chunk and one BK-wide slice of K (the grid of fla's stage).
It issues every load first (the chunk's q, k, g and beta; its own rows and columns of dAqk
and dAkk; its incoming dq, dk, dg), then computes:
- its rows against all earlier tokens of the chunk as one [16, 64] x [64, BK] product per
  score matrix, anchored at its first row a: E(i, j) = exp2(g_i - g_a) exp2(g_a - g_j);
- its keys against all later rows as one [16, 64] x [64, BK] product per score matrix,
  anchored at its last row;
- its diagonal 16 x 16 tile in four levels of anchored products, split at half-block
  boundaries (as kda/001).
Every factor is at most 1 whatever the gate depth (exponents are clamped at 0 and masked
pairs get exp2(-inf) = 0), so the unbounded gate cannot overflow.

Shapes (per launch): q, k [B, T, H, K] bf16; g [B, T, HV, K] fp32 (log2 units); beta
[B, T, HV]; dAqk, dAkk [B, T, HV, 64] fp32; dq, dk, dg [B, T, HV, K] fp32 in, dq2, dk2, dg2
the same out; db2 [NK, B, T, HV] fp32 partial sums over K slices. A packed batch has B == 1
and chunk_indices [(sequence, chunk)] pairs.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

BK = int(os.environ.get("KDA_INTRA_BK", "32"))
NUM_WARPS = int(os.environ.get("KDA_INTRA_WARPS", "4"))
NUM_STAGES = int(os.environ.get("KDA_INTRA_STAGES", "1"))

BT = 64
BC = 16


@triton.jit
def _row_of(b_x, o_i, r: tl.constexpr):
    """Row r of a [BC, BK] tile as a [BK] vector (no reload)."""
    return tl.sum(tl.where((o_i == r)[:, None], b_x, 0.0), axis=0)


@triton.jit
def _diag_level(g, row0, L, o_k, m_k, b_g, b_q, b_k, b_kb, b_aq, b_ak, b_pq, b_pk, b_dkt, o_i, m_r,
                HV: tl.constexpr, K: tl.constexpr, S: tl.constexpr):  # fmt: skip
    """One level of a diagonal tile: pairs across the half-block boundaries of size S,
    anchored at the first row a of each upper half: exp2(g_i - g_a) * exp2(g_a - g_j)."""
    anc = (o_i // (2 * S)) * (2 * S) + S
    m_a = (row0 + anc) < L
    b_ga = tl.load(g + (row0 + anc)[:, None] * (HV * K) + o_k[None, :], mask=m_a[:, None] & m_k[None, :],
                   other=0.0)  # fmt: skip
    up = ((o_i % (2 * S)) >= S) & m_r & m_a
    lo = ((o_i % (2 * S)) < S) & m_r & m_a
    m_l = (o_i[:, None] // (2 * S) == o_i[None, :] // (2 * S)) & up[:, None] & lo[None, :]
    b_rf = tl.exp2(tl.where(up[:, None], tl.minimum(b_g - b_ga, 0.0), -float("inf")))
    b_cf = tl.exp2(tl.where(lo[:, None], tl.minimum(b_ga - b_g, 0.0), -float("inf")))
    b_lq = tl.where(m_l, b_aq, 0.0)
    b_lk = tl.where(m_l, b_ak, 0.0)
    b_kc = b_k * b_cf
    b_pq += b_rf * tl.dot(b_lq, b_kc, input_precision="tf32x3")
    b_pk += b_rf * tl.dot(b_lk, b_kc, input_precision="tf32x3")
    b_t = tl.dot(tl.trans(b_lq), b_q * b_rf, input_precision="tf32x3")
    b_t = tl.dot(tl.trans(b_lk), b_kb * b_rf, b_t, input_precision="tf32x3")
    return b_pq, b_pk, b_dkt + b_cf * b_t


@triton.jit(do_not_specialize=["T"])
def kda_bwd_intra_sub_kernel(
    q, k, g, beta, dAqk, dAkk, dq, dk, dg, dq2, dk2, dg2, db2, cu_seqlens, chunk_indices,
    T, NTOK,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr,
    BK: tl.constexpr, NC: tl.constexpr, NK: tl.constexpr, IS_VARLEN: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0).to(tl.int64)
    i_k, i_i, i_t = pid % NK, (pid // NK) % NC, pid // (NK * NC)
    i_bh = tl.program_id(1).to(tl.int64)
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
    i_ti = i_t * BT + i_i * BC
    if i_ti >= L:
        return

    q += (bos * H + i_h) * K
    k += (bos * H + i_h) * K
    g += (bos * HV + i_hv) * K
    beta += bos * HV + i_hv
    dAqk += (bos * HV + i_hv) * BT
    dAkk += (bos * HV + i_hv) * BT
    off = (bos * HV + i_hv) * K
    dq, dk, dg, dq2, dk2, dg2 = dq + off, dk + off, dg + off, dq2 + off, dk2 + off, dg2 + off
    db2 += (i_k * NTOK + bos) * HV + i_hv

    o_i = tl.arange(0, BC)
    o_c = tl.arange(0, BT)  # chunk-local token index
    o_k = i_k * BK + tl.arange(0, BK)
    m_k = o_k < K
    rows = i_ti + o_i
    m_r = rows < L
    m_rk = m_r[:, None] & m_k[None, :]
    crow = i_t * BT + o_c
    m_c = crow < L
    m_ck = m_c[:, None] & m_k[None, :]
    lo_i = i_i * BC  # first chunk-local row of this sub-chunk

    # every load first: the chunk's q, k, g, beta; this sub-chunk's dA rows and columns;
    # its incoming dq, dk, dg
    b_qc = tl.load(q + crow[:, None] * (H * K) + o_k[None, :], mask=m_ck, other=0.0).to(tl.float32)
    b_kc = tl.load(k + crow[:, None] * (H * K) + o_k[None, :], mask=m_ck, other=0.0).to(tl.float32)
    b_gc = tl.load(g + crow[:, None] * (HV * K) + o_k[None, :], mask=m_ck, other=0.0)
    b_bc = tl.load(beta + crow * HV, mask=m_c, other=0.0).to(tl.float32)
    p_row = rows[:, None] * (HV * BT) + o_c[None, :]  # [ours, all]
    m_row = m_r[:, None] & m_c[None, :]
    b_aqr = tl.load(dAqk + p_row, mask=m_row, other=0.0)
    b_akr = tl.load(dAkk + p_row, mask=m_row, other=0.0)
    p_col = crow[:, None] * (HV * BT) + (lo_i + o_i)[None, :]  # [all, ours]
    m_col = m_c[:, None] & m_r[None, :]
    b_aqc = tl.load(dAqk + p_col, mask=m_col, other=0.0)
    b_akc = tl.load(dAkk + p_col, mask=m_col, other=0.0)
    p_o = rows[:, None] * (HV * K) + o_k[None, :]
    b_dq = tl.load(dq + p_o, mask=m_rk, other=0.0)
    b_dk = tl.load(dk + p_o, mask=m_rk, other=0.0)
    b_dg = tl.load(dg + p_o, mask=m_rk, other=0.0)
    b_g = tl.load(g + rows[:, None] * (HV * K) + o_k[None, :], mask=m_rk, other=0.0)
    b_q = tl.load(q + rows[:, None] * (H * K) + o_k[None, :], mask=m_rk, other=0.0).to(tl.float32)
    b_k = tl.load(k + rows[:, None] * (H * K) + o_k[None, :], mask=m_rk, other=0.0).to(tl.float32)
    b_b = tl.load(beta + rows * HV, mask=m_r, other=0.0).to(tl.float32)
    b_kb = b_k * b_b[:, None]

    # rows of this sub-chunk against every earlier token of the chunk, anchored at this
    # sub-chunk's first row a: exp2(g_i - g_a) * exp2(g_a - g_j), both <= 1
    b_gn = _row_of(b_g, o_i, 0)
    before = (o_c < lo_i)[:, None] & m_ck
    b_kg = b_kc * tl.exp2(tl.where(before, tl.minimum(b_gn[None, :] - b_gc, 0.0), -float("inf")))
    m_bcol = (o_c < lo_i)[None, :]
    b_pq = tl.dot(tl.where(m_bcol, b_aqr, 0.0), b_kg)
    b_pk = tl.dot(tl.where(m_bcol, b_akr, 0.0), b_kg)
    b_e = tl.exp2(tl.minimum(b_g - b_gn[None, :], 0.0))
    b_pq *= b_e
    b_pk *= b_e

    # this sub-chunk's keys against every later row of the chunk, anchored at its last row l
    b_gl = _row_of(b_g, o_i, BC - 1)
    after = (o_c >= lo_i + BC)[:, None] & m_ck
    b_f = tl.exp2(tl.where(after, tl.minimum(b_gc - b_gl[None, :], 0.0), -float("inf")))
    m_arow = (o_c >= lo_i + BC)[:, None]
    b_t = tl.dot(tl.trans(tl.where(m_arow, b_aqc, 0.0)), b_qc * b_f)
    b_t = tl.dot(tl.trans(tl.where(m_arow, b_akc, 0.0)), b_kc * b_bc[:, None] * b_f, b_t)
    b_dkt = b_t * tl.exp2(tl.minimum(b_gl[None, :] - b_g, 0.0))

    # the diagonal tile, level by level
    m_d = (o_i[:, None] >= o_i[None, :]) & m_r[:, None] & m_r[None, :]
    p_d = rows[:, None] * (HV * BT) + (lo_i + o_i)[None, :]
    b_aq = tl.load(dAqk + p_d, mask=m_d, other=0.0)
    b_ak = tl.load(dAkk + p_d, mask=m_d, other=0.0)
    eye = o_i[:, None] == o_i[None, :]
    b_eq = tl.sum(tl.where(eye, b_aq, 0.0), axis=1)
    b_ek = tl.sum(tl.where(eye, b_ak, 0.0), axis=1)
    b_pq += b_eq[:, None] * b_k
    b_pk += b_ek[:, None] * b_k
    b_dkt += b_eq[:, None] * b_q + b_ek[:, None] * b_kb
    for lvl in tl.static_range(4):
        b_pq, b_pk, b_dkt = _diag_level(g, rows - o_i, L, o_k, m_k, b_g, b_q, b_k, b_kb, b_aq, b_ak,
                                        b_pq, b_pk, b_dkt, o_i, m_r, HV, K, 8 >> lvl)  # fmt: skip

    tl.store(db2 + rows * HV, tl.sum(b_pk * b_k, axis=1), mask=m_r)
    b_pk *= b_b[:, None]
    tl.store(dg2 + p_o, b_q * b_pq + (b_pk - b_dkt) * b_k + b_dg, mask=m_rk)
    tl.store(dq2 + p_o, b_pq + b_dq, mask=m_rk)
    tl.store(dk2 + p_o, b_pk + b_dkt + b_dk, mask=m_rk)


def kda_bwd_intra(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, cu_seqlens=None, chunk_indices=None):
    """(dq, dk, db, dg) after the intra-chunk terms. q, k [B, T, H, K] bf16; g [B, T, HV, K]
    fp32 chunk-local cumulative gate in log2 units; beta [B, T, HV]; dAqk, dAkk [B, T, HV, 64]
    fp32; dq, dk, dg [B, T, HV, K] fp32; db beta's shape fp32. chunk_indices is required with
    cu_seqlens (fla's prepare_chunk_indices(cu_seqlens, 64))."""
    B, T, H, Kd = k.shape
    HV = g.shape[2]
    NK = triton.cdiv(Kd, BK)
    NC = BT // BC
    NT = triton.cdiv(T, BT) if cu_seqlens is None else len(chunk_indices)
    dq2, dk2 = torch.empty_like(dq), torch.empty_like(dk)
    dg2 = torch.empty_like(dg, dtype=torch.float32)
    db2 = torch.empty((NK, *beta.shape), dtype=torch.float32, device=beta.device)
    grid = (NK * NC * NT, B * HV)
    kda_bwd_intra_sub_kernel[grid](
        q, k, g, beta, dAqk, dAkk, dq, dk, dg, dq2, dk2, dg2, db2, cu_seqlens, chunk_indices,
        T, B * T, H=H, HV=HV, K=Kd, BT=BT, BC=BC, BK=BK, NC=NC, NK=NK,
        IS_VARLEN=cu_seqlens is not None, num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )  # fmt: skip
    return dq2, dk2, db2.sum(0).add_(db), dg2
