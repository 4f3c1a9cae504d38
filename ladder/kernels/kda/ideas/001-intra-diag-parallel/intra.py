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
factors of E are at most 1 (exact). The diagonal 16 x 16 block is one [16, 16, BK] computation:
E evaluated once per pair with the exponent masked to -inf above the diagonal (never above 1,
whatever the gate depth), then used for P_q, P_k and dkt.

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

    # the diagonal block, all pairs at once: E[i, j, :] = exp2(g_i - g_j) for j <= i
    p_d = rows[:, None] * (HV * BT) + (i_i * BC + o_i)[None, :]
    m_d = (o_i[:, None] >= o_i[None, :]) & m_r[:, None] & m_r[None, :]
    b_dq_d = tl.load(dAqk + p_d, mask=m_d, other=0.0)
    b_dk_d = tl.load(dAkk + p_d, mask=m_d, other=0.0)
    b_x = tl.where(m_d[:, :, None], b_g[:, None, :] - b_g[None, :, :], float("-inf"))
    b_E = tl.exp2(b_x)
    b_kE = b_k[None, :, :] * b_E
    b_pq += tl.sum(b_dq_d[:, :, None] * b_kE, axis=1)
    b_pk += tl.sum(b_dk_d[:, :, None] * b_kE, axis=1)
    b_kb = b_k * b_b[:, None]
    b_src = b_dq_d[:, :, None] * b_q[:, None, :] + b_dk_d[:, :, None] * b_kb[:, None, :]
    b_dkt = tl.sum(b_src * b_E, axis=0)

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
