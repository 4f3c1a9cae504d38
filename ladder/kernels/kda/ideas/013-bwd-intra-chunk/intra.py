"""The backward intra-chunk stage of chunk KDA, one program per chunk and K slice.

The arithmetic is kda/003's (its ``intra.py`` docstring gives the terms and why the anchored
products cannot overflow): per 16-token sub-chunk I, the products against the earlier
sub-chunks anchored at I's first row, the products against the later sub-chunks anchored at
I's last row, and the diagonal tile as tf32x3 products anchored at the column midpoint, or,
past DIAG_RANGE, an exact serial loop. What changes is the grid. kda/003 gives each
(sub-chunk, K slice) its own program, so the four programs of a chunk each load the other
sub-chunks' q, k, g, beta and dA tiles again (16 sub-chunk loads of k and g per chunk and
slice where 4 are needed), mostly from L2, and each pays the prologue. Here one program
takes a chunk's K slice and walks its four sub-chunks in a loop unrolled at compile time
(``tl.static_range``), so every sub-chunk index and pair is a constant and a chunk's rows are
decided once; the hypothesis (NOTES.md) was that the repeated tiles then come from the same
SM's L1. Each sub-chunk's terms are summed in kda/003's order, so on the interpreter the
outputs are kda/003's bit for bit (tests/test_kda_intra.py checks both against a float64
definition); on the GPU they differ from kda/003's in the last bits (NOTES.md).

Shapes (per launch) as kda/003's: q, k [B, T, H, K] bf16; g [B, T, HV, K] fp32 (log2 units);
beta [B, T, HV]; dAqk, dAkk [B, T, HV, 64] fp32; dq, dk, dg [B, T, HV, K] fp32 in, the same
out; db2 [NK, B, T, HV] fp32 partial sums over K slices. A packed batch has B == 1 and
chunk_indices [(sequence, chunk)] pairs.

Env knobs (read once at import):
    KDA_INTRA13_BK      K slice per program (default 32)
    KDA_INTRA13_WARPS   warps per program (default 2)
    KDA_INTRA13_STAGES  software-pipeline stages of the exact loop (default 2)
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

BK = int(os.environ.get("KDA_INTRA13_BK", "32"))
NUM_WARPS = int(os.environ.get("KDA_INTRA13_WARPS", "2"))
NUM_STAGES = int(os.environ.get("KDA_INTRA13_STAGES", "2"))

BT = 64
BC = 16
DIAG_RANGE = 128.0  # kda/003's limit (log2 units per 16-token tile and K slice)


@triton.jit
def _sub_chunk(
    q, k, g, beta, dAqk, dAkk, dq, dk, dg, dq2, dk2, dg2, db2, i_t, L, n_sub, o_i, o_k, m_k,
    SQK: tl.constexpr, SG: tl.constexpr, SA: tl.constexpr, HV: tl.constexpr, BT: tl.constexpr,
    BC: tl.constexpr, BK: tl.constexpr, NC: tl.constexpr, I: tl.constexpr,
    DIAG_RANGE: tl.constexpr,
):  # fmt: skip
    """Sub-chunk I (a constant) of chunk i_t: every term of its rows and keys, stored."""
    i_ti = i_t * BT + I * BC
    rows = i_ti + o_i
    m_r = rows < L
    m_rk = m_r[:, None] & m_k[None, :]

    b_g = tl.load(g + rows[:, None] * SG + o_k[None, :], mask=m_rk, other=0.0)
    b_q = tl.load(q + rows[:, None] * SQK + o_k[None, :], mask=m_rk, other=0.0).to(tl.float32)
    b_k = tl.load(k + rows[:, None] * SQK + o_k[None, :], mask=m_rk, other=0.0).to(tl.float32)
    b_b = tl.load(beta + rows * HV, mask=m_r, other=0.0).to(tl.float32)

    # I's rows against the earlier sub-chunks, anchored at I's first row
    b_pq = tl.zeros([BC, BK], dtype=tl.float32)
    b_pk = tl.zeros([BC, BK], dtype=tl.float32)
    if I > 0:
        b_ga = tl.load(g + i_ti * SG + o_k, mask=m_k, other=0.0)
        for J in tl.static_range(I):
            cols = i_t * BT + J * BC + o_i
            p_j = cols[:, None] * SQK + o_k[None, :]
            b_kj = tl.load(k + p_j, mask=m_k[None, :], other=0.0).to(tl.float32)
            b_gj = tl.load(g + cols[:, None] * SG + o_k[None, :], mask=m_k[None, :], other=0.0)
            b_kg = b_kj * tl.exp2(b_ga[None, :] - b_gj)
            p_a = rows[:, None] * SA + (J * BC + o_i)[None, :]
            b_aq = tl.load(dAqk + p_a, mask=m_r[:, None], other=0.0)
            b_ak = tl.load(dAkk + p_a, mask=m_r[:, None], other=0.0)
            b_pq = tl.dot(b_aq, b_kg, b_pq)
            b_pk = tl.dot(b_ak, b_kg, b_pk)
        b_e = tl.where(m_rk, tl.exp2(b_g - b_ga[None, :]), 0.0)
        b_pq *= b_e
        b_pk *= b_e

    # I's keys against the later sub-chunks, anchored at I's last row
    b_dkt = tl.zeros([BC, BK], dtype=tl.float32)
    if I < NC - 1:
        if I < n_sub - 1:  # then I is whole: its last row is i_ti + BC - 1
            b_gl = tl.load(g + (i_ti + BC - 1) * SG + o_k, mask=m_k, other=0.0)
            for J in tl.static_range(I + 1, NC):
                if J < n_sub:
                    rj = i_t * BT + J * BC + o_i
                    m_j = rj < L
                    m_jk = m_j[:, None] & m_k[None, :]
                    p_j = rj[:, None] * SQK + o_k[None, :]
                    b_qj = tl.load(q + p_j, mask=m_jk, other=0.0).to(tl.float32)
                    b_kj = tl.load(k + p_j, mask=m_jk, other=0.0).to(tl.float32)
                    b_gj = tl.load(g + rj[:, None] * SG + o_k[None, :], mask=m_jk, other=0.0)
                    b_bj = tl.load(beta + rj * HV, mask=m_j, other=0.0).to(tl.float32)
                    b_f = tl.where(m_jk, tl.exp2(b_gj - b_gl[None, :]), 0.0)
                    p_a = rj[:, None] * SA + (I * BC + o_i)[None, :]  # [later rows, I's cols]
                    b_aq = tl.load(dAqk + p_a, mask=m_j[:, None], other=0.0)
                    b_ak = tl.load(dAkk + p_a, mask=m_j[:, None], other=0.0)
                    b_dkt = tl.dot(tl.trans(b_aq), b_qj * b_f, b_dkt)
                    b_dkt = tl.dot(tl.trans(b_ak), b_kj * b_bj[:, None] * b_f, b_dkt)
            b_dkt *= tl.where(m_rk, tl.exp2(b_gl[None, :] - b_g), 0.0)

    # the diagonal tile
    m_d = (o_i[:, None] >= o_i[None, :]) & m_r[:, None] & m_r[None, :]
    p_d = rows[:, None] * SA + (I * BC + o_i)[None, :]
    b_aq = tl.load(dAqk + p_d, mask=m_d, other=0.0)
    b_ak = tl.load(dAkk + p_d, mask=m_d, other=0.0)
    g_hi = tl.max(tl.where(m_rk, b_g, -float("inf")), axis=0)
    g_lo = tl.min(tl.where(m_rk, b_g, float("inf")), axis=0)
    r = tl.max(tl.where(m_k, g_hi - g_lo, 0.0), axis=0)
    b_kb = b_k * b_b[:, None]
    if r <= DIAG_RANGE:
        b_m = tl.where(m_k, 0.5 * (g_hi + g_lo), 0.0)
        b_ef = tl.where(m_rk, tl.exp2(b_g - b_m[None, :]), 0.0)  # row factors
        b_eb = tl.where(m_rk, tl.exp2(b_m[None, :] - b_g), 0.0)  # column factors
        b_kc = b_k * b_eb
        b_pq += b_ef * tl.dot(b_aq, b_kc, input_precision="tf32x3")
        b_pk += b_ef * tl.dot(b_ak, b_kc, input_precision="tf32x3")
        b_t = tl.dot(tl.trans(b_aq), b_q * b_ef, input_precision="tf32x3")
        b_t = tl.dot(tl.trans(b_ak), b_kb * b_ef, b_t, input_precision="tf32x3")
        b_dkt += b_eb * b_t
    else:
        n_d = tl.minimum(BC, L - i_ti)
        for j in range(0, n_d):
            # column j of the tile against every row i >= j: [BC] dA column, [BK] row j
            rj = i_ti + j
            c_q = tl.load(dAqk + rows * SA + I * BC + j, mask=m_r & (o_i >= j), other=0.0)
            c_k = tl.load(dAkk + rows * SA + I * BC + j, mask=m_r & (o_i >= j), other=0.0)
            k_j = tl.load(k + rj * SQK + o_k, mask=m_k, other=0.0).to(tl.float32)
            g_j = tl.load(g + rj * SG + o_k, mask=m_k, other=0.0)
            b_e = tl.exp2(tl.where((o_i >= j)[:, None] & m_rk, b_g - g_j[None, :], -float("inf")))
            b_ke = k_j[None, :] * b_e
            b_pq += c_q[:, None] * b_ke
            b_pk += c_k[:, None] * b_ke
        for i in range(0, n_d):
            # row i of the tile against every column j <= i: [BC] dA row, [BK] row i
            ri = i_ti + i
            r_q = tl.load(dAqk + ri * SA + I * BC + o_i, mask=(o_i <= i), other=0.0)
            r_k = tl.load(dAkk + ri * SA + I * BC + o_i, mask=(o_i <= i), other=0.0)
            q_i = tl.load(q + ri * SQK + o_k, mask=m_k, other=0.0).to(tl.float32)
            k_i = tl.load(k + ri * SQK + o_k, mask=m_k, other=0.0).to(tl.float32)
            b_i = tl.load(beta + ri * HV).to(tl.float32)
            g_i = tl.load(g + ri * SG + o_k, mask=m_k, other=0.0)
            b_e = tl.exp2(tl.where((o_i <= i)[:, None] & m_rk, g_i[None, :] - b_g, -float("inf")))
            b_dkt += (r_q[:, None] * q_i[None, :] + r_k[:, None] * (b_i * k_i)[None, :]) * b_e

    p_o = rows[:, None] * SG + o_k[None, :]
    tl.store(db2 + rows * HV, tl.sum(b_pk * b_k, axis=1), mask=m_r)
    b_pk *= b_b[:, None]
    b_dq = tl.load(dq + p_o, mask=m_rk, other=0.0)
    tl.store(dq2 + p_o, b_pq + b_dq, mask=m_rk)
    b_dk = tl.load(dk + p_o, mask=m_rk, other=0.0)
    tl.store(dk2 + p_o, b_pk + b_dkt + b_dk, mask=m_rk)
    b_dg = tl.load(dg + p_o, mask=m_rk, other=0.0)
    tl.store(dg2 + p_o, b_q * b_pq + (b_pk - b_dkt) * b_k + b_dg, mask=m_rk)


@triton.jit(do_not_specialize=["T"])
def kda_bwd_intra_chunk_kernel(
    q, k, g, beta, dAqk, dAkk, dq, dk, dg, dq2, dk2, dg2, db2, cu_seqlens, chunk_indices,
    T, NTOK,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr,
    BK: tl.constexpr, NC: tl.constexpr, NK: tl.constexpr, IS_VARLEN: tl.constexpr,
    DIAG_RANGE: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0).to(tl.int64)
    i_k, i_t = pid % NK, pid // NK
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

    SQK: tl.constexpr = H * K  # row strides
    SG: tl.constexpr = HV * K
    SA: tl.constexpr = HV * BT
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
    n_sub = tl.minimum(NC, tl.cdiv(L - i_t * BT, BC))  # sub-chunks of this chunk with rows
    for I in tl.static_range(NC):
        if I < n_sub:
            _sub_chunk(
                q, k, g, beta, dAqk, dAkk, dq, dk, dg, dq2, dk2, dg2, db2, i_t, L, n_sub, o_i,
                o_k, m_k, SQK, SG, SA, HV, BT, BC, BK, NC, I, DIAG_RANGE,
            )  # fmt: skip


def kda_bwd_intra(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, cu_seqlens=None, chunk_indices=None):
    """(dq, dk, db, dg) after the intra-chunk terms, as kda/003's ``kda_bwd_intra``: q, k
    [B, T, H, K] bf16; g [B, T, HV, K] fp32 chunk-local cumulative gate in log2 units; beta
    [B, T, HV]; dAqk, dAkk [B, T, HV, 64] fp32; dq, dk, dg [B, T, HV, K] fp32; db beta's
    shape fp32. chunk_indices is required with cu_seqlens (fla's
    prepare_chunk_indices(cu_seqlens, 64)). Raises ValueError when it is missing."""
    if cu_seqlens is not None and chunk_indices is None:
        raise ValueError("kda_bwd_intra: cu_seqlens needs chunk_indices "
                         "(fla's prepare_chunk_indices(cu_seqlens, 64))")  # fmt: skip
    B, T, H, Kd = k.shape
    HV = g.shape[2]
    NK = triton.cdiv(Kd, BK)
    NC = BT // BC
    NT = triton.cdiv(T, BT) if cu_seqlens is None else len(chunk_indices)
    dq2, dk2 = torch.empty_like(dq), torch.empty_like(dk)
    dg2 = torch.empty_like(dg, dtype=torch.float32)
    db2 = torch.empty((NK, *beta.shape), dtype=torch.float32, device=beta.device)
    grid = (NK * NT, B * HV)
    kda_bwd_intra_chunk_kernel[grid](
        q, k, g, beta, dAqk, dAkk, dq, dk, dg, dq2, dk2, dg2, db2, cu_seqlens, chunk_indices,
        T, B * T, H=H, HV=HV, K=Kd, BT=BT, BC=BC, BK=BK, NC=NC, NK=NK,
        IS_VARLEN=cu_seqlens is not None, DIAG_RANGE=DIAG_RANGE, num_warps=NUM_WARPS,
        num_stages=NUM_STAGES,
    )  # fmt: skip
    return dq2, dk2, db2.sum(0).add_(db), dg2
