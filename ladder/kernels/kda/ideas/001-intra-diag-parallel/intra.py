"""The backward intra-chunk stage of chunk KDA, with the diagonal blocks computed in parallel.

For one 64-token chunk of one value head, with g the chunk-local cumulative gate in log2
units (non-increasing in t), E(i, j) = exp2(g_i - g_j) per K column for j <= i, and the
gradients dAqk, dAkk of the chunk's [64, 64] score matrices (lower triangular; dAkk strictly):

    P_q[i]  = sum_{j <= i} dAqk[i, j] k_j E(i, j)        dq  += P_q
    P_k[i]  = sum_{j <= i} dAkk[i, j] k_j E(i, j)        db  += <P_k[i], k_i>,  dk += beta_i P_k[i]
    dkt[j]  = sum_{i >= j} (dAqk[i, j] q_i + dAkk[i, j] beta_i k_i) E(i, j)     dk += dkt
    dg     += q * P_q + (beta P_k - dkt) * k

A program takes one 16-token sub-chunk and one BK-wide slice of K. Blocks off the diagonal
are 16 x 16 tensor-core products with the gate anchored at the sub-chunk boundary, so both
factors of E are at most 1 (exact). The diagonal 16 x 16 block is split the same way,
recursively: at each of four levels the pairs across a half-block boundary are one masked
16 x 16 product anchored at that boundary, so no factor ever exceeds 1 whatever the gate
depth, and no pair needs an exp of its own.

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
NUM_STAGES = int(os.environ.get("KDA_INTRA_STAGES", "2"))

BT = 64
BC = 16


@triton.jit
def _diag_level(
    g, b_g, b_q, b_k, b_kb, b_aq, b_ak, b_pq, b_pk, b_dkt, o_i, o_k, m_k, m_r, i_ti, L,
    HV: tl.constexpr, K: tl.constexpr, S: tl.constexpr,
):  # fmt: skip
    """One level of the diagonal block: pairs across the half-block boundaries of size S."""
    anc = (o_i // (2 * S)) * (2 * S) + S
    m_a = (i_ti + anc) < L
    b_ga = tl.load(
        g + (i_ti + anc)[:, None] * (HV * K) + o_k[None, :],
        mask=m_a[:, None] & m_k[None, :],
        other=0.0,
    )
    up = ((o_i % (2 * S)) >= S) & m_r & m_a
    lo = ((o_i % (2 * S)) < S) & m_r & m_a
    m_l = (o_i[:, None] // (2 * S) == o_i[None, :] // (2 * S)) & up[:, None] & lo[None, :]
    b_rf = tl.exp2(tl.where(up[:, None] & m_k[None, :], tl.minimum(b_g - b_ga, 0.0), -float("inf")))
    b_cf = tl.exp2(tl.where(lo[:, None] & m_k[None, :], tl.minimum(b_ga - b_g, 0.0), -float("inf")))
    b_lq = tl.where(m_l, b_aq, 0.0)
    b_lk = tl.where(m_l, b_ak, 0.0)
    b_kc = b_k * b_cf
    b_pq += b_rf * tl.dot(b_lq, b_kc, input_precision="tf32x3")
    b_pk += b_rf * tl.dot(b_lk, b_kc, input_precision="tf32x3")
    b_t = tl.dot(tl.trans(b_lq), b_q * b_rf, input_precision="tf32x3")
    b_t = tl.dot(tl.trans(b_lk), b_kb * b_rf, b_t, input_precision="tf32x3")
    return b_pq, b_pk, b_dkt + b_cf * b_t


@triton.jit(do_not_specialize=["T"])
def kda_bwd_intra_kernel(
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
    i_ti = i_t * BT + i_i * BC  # first row of this sub-chunk, within the sequence
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
    o_k = i_k * BK + tl.arange(0, BK)
    m_k = o_k < K
    rows = i_ti + o_i
    m_r = rows < L
    m_rk = m_r[:, None] & m_k[None, :]
    b_g = tl.load(g + rows[:, None] * (HV * K) + o_k[None, :], mask=m_rk, other=0.0)
    b_q = tl.load(q + rows[:, None] * (H * K) + o_k[None, :], mask=m_rk, other=0.0).to(tl.float32)
    b_k = tl.load(k + rows[:, None] * (H * K) + o_k[None, :], mask=m_rk, other=0.0).to(tl.float32)
    b_b = tl.load(beta + rows * HV, mask=m_r, other=0.0).to(tl.float32)

    # rows of this sub-chunk against the earlier sub-chunks of the chunk (tensor cores)
    b_pq = tl.zeros([BC, BK], dtype=tl.float32)
    b_pk = tl.zeros([BC, BK], dtype=tl.float32)
    if i_i > 0:
        b_gn = tl.load(g + i_ti * (HV * K) + o_k, mask=m_k, other=0.0)
        for i_j in range(0, i_i):
            cols = i_t * BT + i_j * BC + o_i
            b_kj = tl.load(k + cols[:, None] * (H * K) + o_k[None, :], mask=m_k[None, :], other=0.0)
            b_gj = tl.load(
                g + cols[:, None] * (HV * K) + o_k[None, :], mask=m_k[None, :], other=0.0
            )
            b_kg = b_kj.to(tl.float32) * tl.exp2(b_gn[None, :] - b_gj)
            p_a = rows[:, None] * (HV * BT) + (i_j * BC + o_i)[None, :]
            b_aq = tl.load(dAqk + p_a, mask=m_r[:, None], other=0.0)
            b_ak = tl.load(dAkk + p_a, mask=m_r[:, None], other=0.0)
            b_pq = tl.dot(b_aq, b_kg, b_pq)
            b_pk = tl.dot(b_ak, b_kg, b_pk)
        b_e = tl.exp2(tl.where(m_rk, b_g - b_gn[None, :], 0.0))
        b_pq *= b_e
        b_pk *= b_e

    # The diagonal block, level by level: for s = 8, 4, 2, 1 the pairs (i, j) with i in the
    # upper and j in the lower half of the same 2s-row block, anchored at the first row a of
    # that upper half: E(i, j) = exp2(g_i - g_a) * exp2(g_a - g_j), both factors <= 1. Every
    # pair j < i falls in exactly one level (the highest bit where i and j differ); j == i
    # has E = 1. Products in tf32x3, close to fp32.
    p_d = rows[:, None] * (HV * BT) + (i_i * BC + o_i)[None, :]
    m_d = (o_i[:, None] >= o_i[None, :]) & m_r[:, None] & m_r[None, :]
    b_aq = tl.load(dAqk + p_d, mask=m_d, other=0.0)
    b_ak = tl.load(dAkk + p_d, mask=m_d, other=0.0)
    b_kb = b_k * b_b[:, None]
    eye = o_i[:, None] == o_i[None, :]
    b_eq = tl.sum(tl.where(eye, b_aq, 0.0), axis=1)
    b_ek = tl.sum(tl.where(eye, b_ak, 0.0), axis=1)
    b_pq += b_eq[:, None] * b_k
    b_pk += b_ek[:, None] * b_k
    b_dkt = b_eq[:, None] * b_q + b_ek[:, None] * b_kb
    for lvl in tl.static_range(4):
        b_pq, b_pk, b_dkt = _diag_level(
            g, b_g, b_q, b_k, b_kb, b_aq, b_ak, b_pq, b_pk, b_dkt, o_i, o_k, m_k, m_r,
            i_ti, L, HV=HV, K=K, S=8 >> lvl,
        )  # fmt: skip

    # this sub-chunk's keys against the later sub-chunks' rows (tensor cores)
    NCv = tl.minimum(NC, tl.cdiv(L - i_t * BT, BC))
    if i_i < NCv - 1:
        last = tl.minimum(i_ti + BC, L) - 1
        b_gl = tl.load(g + last * (HV * K) + o_k, mask=m_k, other=0.0)
        b_acc = tl.zeros([BC, BK], dtype=tl.float32)
        for i_j in range(i_i + 1, NCv):
            rj = i_t * BT + i_j * BC + o_i
            m_j = rj < L
            m_jk = m_j[:, None] & m_k[None, :]
            b_qj = tl.load(q + rj[:, None] * (H * K) + o_k[None, :], mask=m_jk, other=0.0)
            b_kj = tl.load(k + rj[:, None] * (H * K) + o_k[None, :], mask=m_jk, other=0.0)
            b_bj = tl.load(beta + rj * HV, mask=m_j, other=0.0).to(tl.float32)
            b_gj = tl.load(g + rj[:, None] * (HV * K) + o_k[None, :], mask=m_jk, other=0.0)
            b_f = tl.where(m_jk, tl.exp2(b_gj - b_gl[None, :]), 0.0)
            p_t = (i_i * BC + o_i)[:, None] + rj[None, :] * (HV * BT)  # [ours, later]
            b_aqt = tl.load(dAqk + p_t, mask=m_j[None, :], other=0.0)
            b_akt = tl.load(dAkk + p_t, mask=m_j[None, :], other=0.0)
            b_acc = tl.dot(b_aqt, b_qj.to(tl.float32) * b_f, b_acc)
            b_acc = tl.dot(b_akt, b_kj.to(tl.float32) * b_bj[:, None] * b_f, b_acc)
        b_dkt += b_acc * tl.exp2(tl.where(m_rk, b_gl[None, :] - b_g, 0.0))

    p_o = rows[:, None] * (HV * K) + o_k[None, :]
    tl.store(db2 + rows * HV, tl.sum(b_pk * b_k, axis=1), mask=m_r)
    b_pk *= b_b[:, None]
    b_dg = b_q * b_pq + (b_pk - b_dkt) * b_k + tl.load(dg + p_o, mask=m_rk, other=0.0)
    tl.store(dg2 + p_o, b_dg, mask=m_rk)
    tl.store(dq2 + p_o, b_pq + tl.load(dq + p_o, mask=m_rk, other=0.0), mask=m_rk)
    b_dk = b_pk + b_dkt + tl.load(dk + p_o, mask=m_rk, other=0.0)
    tl.store(dk2 + p_o, b_dk, mask=m_rk)


def kda_bwd_intra(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, cu_seqlens=None, chunk_indices=None):
    """(dq, dk, db, dg) after the intra-chunk terms; shapes as the module docstring says.
    dq, dk, dg are fp32 [B, T, HV, K]; db is beta's shape in fp32. chunk_indices is required
    with cu_seqlens (fla's prepare_chunk_indices(cu_seqlens, 64))."""
    B, T, H, Kd = k.shape
    HV = g.shape[2]
    NK = triton.cdiv(Kd, BK)
    NC = BT // BC
    NT = triton.cdiv(T, BT) if cu_seqlens is None else len(chunk_indices)
    dq2, dk2 = torch.empty_like(dq), torch.empty_like(dk)
    dg2 = torch.empty_like(dg, dtype=torch.float32)
    db2 = torch.empty((NK, *beta.shape), dtype=torch.float32, device=beta.device)
    grid = (NK * NC * NT, B * HV)
    kda_bwd_intra_kernel[grid](
        q, k, g, beta, dAqk, dAkk, dq, dk, dg, dq2, dk2, dg2, db2, cu_seqlens, chunk_indices,
        T, B * T, H=H, HV=HV, K=Kd, BT=BT, BC=BC, BK=BK, NC=NC, NK=NK,
        IS_VARLEN=cu_seqlens is not None, num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )  # fmt: skip
    return dq2, dk2, db2.sum(0).add_(db), dg2
