"""The fused WY / dq / dk / dg backward stage of chunk KDA, one program per K slice.

For one 64-token chunk of one value head (chunk-local cumulative gate g in log2 units, gn
its last valid row; h, dh the chunk's state and state gradient [V, K]; A the chunk's
inverted [64, 64] WY matrix as the forward stored it; v_new the chunk's corrected values):

    dq  = scale * exp2(g) * (do @ h)
    dk0 = exp2(gn - g) * (v_new @ dh)
    dw  = -(dv @ h)                      dkgb = A^T dw   (kg = k * exp2(g))
    dk  = dk0 + beta * exp2(g) * dkgb
    dg  = q * dq - k * dk0 + [last row] (exp2(gn) * sum_V h * dh + sum_t k * dk0)
          + beta * kg * dkgb
    dv2 = beta * (A^T dv),  db = sum_V (A^T dv) * v + sum_K dkgb * kg
    dA  = -tril_strict(A^T (tril_strict(beta_j * (dv @ v^T + dw @ kg^T)) A^T))

fla 0.6.0's ``chunk_kda_bwd_kernel_wy_dqkg_fused`` runs one program per chunk and value head
that walks all of K (128) and V (256) with three [64, K] fp32 accumulators: 255 registers
with spills at its 8-warp launch, one program per SM, 87% of cycles with no eligible warp
(ncu, ../003-intra-anchored-diag/NOTES.md). Here the chunk's K is split over NK programs
(BK wide): each holds three [64, BK] accumulators, walks V once for dq, dk and dw (a
pipelined loop over BV-wide blocks of do, v_new, dv, h and dh), and takes the dv terms
(dv2, the dv @ v^T part of dA, the dv part of db) for every NK-th V block, so the programs
of one chunk share that work. dA and db are sums over the chunk's programs: each program
stores its part (the first program in dA and db themselves, the others in scratch of
(NK - 1) times dA's size), and the last of them to finish (an acq_rel counter per
chunk and head) adds the parts in a fixed order, applies the two triangular products and
writes dA and db, so the result does not depend on which program finishes first.

Shapes: q, k [B, T, H, K] bf16; v, v_new, do, dv [B, T, HV, V] bf16; g [B, T, HV, K] fp32
(log2 units); beta [B, T, HV]; A [B, T, HV, 64] (q's dtype); h, dh [B*NT or NT, HV, V, K]
bf16 (state_v_first); out dq, dk, dg [B, T, HV, K] fp32, dv2 like v, db beta's shape fp32,
dA [B, T, HV, 64] fp32. A packed batch has B == 1 and chunk_indices [(sequence, chunk)].
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

BK = int(os.environ.get("KDA_WY_BK", "64"))
BV = int(os.environ.get("KDA_WY_BV", "64"))
NUM_WARPS = int(os.environ.get("KDA_WY_WARPS", "8"))
NUM_STAGES = int(os.environ.get("KDA_WY_STAGES", "2"))

BT = 64


@triton.jit(do_not_specialize=["T", "NTG"])
def kda_bwd_wy_kernel(
    q, k, v, v_new, g, beta, A, h, do, dh, dv, dq, dk, dv2, dg, db, dA, dA_part, db_part,
    counter, cu_seqlens, chunk_indices, scale, T, NTG,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr, NK: tl.constexpr, IS_VARLEN: tl.constexpr,
    NUM_STAGES: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0).to(tl.int64)
    i_k, i_t = pid % NK, pid // NK
    i_bh = tl.program_id(1).to(tl.int64)
    i_b, i_hv = i_bh // HV, i_bh % HV
    i_h = i_hv // (HV // H)
    if IS_VARLEN:
        i_tg = i_t
        i_n = tl.load(chunk_indices + i_t * 2).to(tl.int64)
        i_t = tl.load(chunk_indices + i_t * 2 + 1).to(tl.int64)
        bos = tl.load(cu_seqlens + i_n).to(tl.int64)
        eos = tl.load(cu_seqlens + i_n + 1).to(tl.int64)
    else:
        i_tg = i_b * tl.cdiv(T, BT) + i_t
        bos = i_b * T
        eos = bos + T
    L = eos - bos

    SQK: tl.constexpr = H * K  # row strides
    SG: tl.constexpr = HV * K
    SV: tl.constexpr = HV * V
    SA: tl.constexpr = HV * BT
    q += (bos * H + i_h) * K
    k += (bos * H + i_h) * K
    g += (bos * HV + i_hv) * K
    beta += bos * HV + i_hv
    A += (bos * HV + i_hv) * BT
    h += (i_tg * HV + i_hv) * K * V
    dh += (i_tg * HV + i_hv) * K * V
    voff = (bos * HV + i_hv) * V
    v, v_new, do, dv, dv2 = v + voff, v_new + voff, do + voff, dv + voff, dv2 + voff
    koff = (bos * HV + i_hv) * K
    dq, dk, dg = dq + koff, dk + koff, dg + koff

    o_t = i_t * BT + tl.arange(0, BT)
    m_t = o_t < L
    last = tl.minimum(L, i_t * BT + BT) - 1
    o_k = i_k * BK + tl.arange(0, BK)
    m_k = o_k < K
    m_tk = m_t[:, None] & m_k[None, :]

    # dq, dk0 and dw over V; sum_V h * dh per K column
    b_dq = tl.zeros([BT, BK], dtype=tl.float32)
    b_dk = tl.zeros([BT, BK], dtype=tl.float32)
    b_dw = tl.zeros([BT, BK], dtype=tl.float32)
    b_dgk = tl.zeros([BK], dtype=tl.float32)
    r0 = (i_t * BT).to(tl.int32)  # block-pointer offsets are 32-bit
    k0 = (i_k * BK).to(tl.int32)
    for i_v in tl.range(0, tl.cdiv(V, BV), num_stages=NUM_STAGES):
        p_do = tl.make_block_ptr(do, (L, V), (SV, 1), (r0, i_v * BV), (BT, BV), (1, 0))
        p_vn = tl.make_block_ptr(v_new, (L, V), (SV, 1), (r0, i_v * BV), (BT, BV), (1, 0))
        p_dv = tl.make_block_ptr(dv, (L, V), (SV, 1), (r0, i_v * BV), (BT, BV), (1, 0))
        p_h = tl.make_block_ptr(h, (V, K), (K, 1), (i_v * BV, k0), (BV, BK), (1, 0))
        p_dh = tl.make_block_ptr(dh, (V, K), (K, 1), (i_v * BV, k0), (BV, BK), (1, 0))
        b_do = tl.load(p_do, boundary_check=(0, 1), padding_option="zero")
        b_vn = tl.load(p_vn, boundary_check=(0, 1), padding_option="zero")
        b_dv = tl.load(p_dv, boundary_check=(0, 1), padding_option="zero")
        b_h = tl.load(p_h, boundary_check=(0, 1), padding_option="zero")
        b_dh = tl.load(p_dh, boundary_check=(0, 1), padding_option="zero")
        b_dgk += tl.sum(b_h.to(tl.float32) * b_dh.to(tl.float32), axis=0)
        b_dq = tl.dot(b_do, b_h, b_dq)
        b_dk = tl.dot(b_vn, b_dh, b_dk)
        b_dw = tl.dot(b_dv, b_h, b_dw)

    # epilogue, ordered so that few [BT, BK] tiles are live at once
    p_tk = o_t[:, None] * SG + o_k[None, :]
    b_g = tl.load(g + p_tk, mask=m_tk, other=0.0).to(tl.float32)
    b_ge = tl.exp2(b_g)
    b_dq = b_dq * b_ge * scale
    tl.store(dq + p_tk, b_dq, mask=m_tk)
    b_q = tl.load(q + o_t[:, None] * SQK + o_k[None, :], mask=m_tk, other=0.0).to(tl.float32)
    b_dg = b_q * b_dq
    b_gn = tl.load(g + last * SG + o_k, mask=m_k, other=0.0).to(tl.float32)
    b_dk = b_dk * tl.where(m_tk, tl.exp2(b_gn[None, :] - b_g), 0.0)
    b_k = tl.load(k + o_t[:, None] * SQK + o_k[None, :], mask=m_tk, other=0.0).to(tl.float32)
    b_kdk = b_k * b_dk
    b_dgk = b_dgk * tl.exp2(b_gn) + tl.sum(b_kdk, axis=0)
    b_dg -= b_kdk
    b_dg += (o_t == last)[:, None] * b_dgk[None, :]
    b_kg = b_k * b_ge
    # A transposed: b_At[i, j] = A[j, i]
    o_c = tl.arange(0, BT)
    b_At = tl.load(A + o_c[:, None] + o_t[None, :] * SA, mask=m_t[None, :], other=0.0)
    b_dwn = (-b_dw).to(b_At.dtype)
    b_dA = tl.dot(b_dwn, tl.trans(b_kg.to(b_At.dtype)))
    b_dkgb = tl.dot(b_At, b_dwn)
    b_db = tl.sum(b_dkgb * b_kg, axis=1)
    b_beta = tl.load(beta + o_t * HV, mask=m_t, other=0.0).to(tl.float32)
    b_dkgb *= b_beta[:, None]
    b_dg += b_kg * b_dkgb
    tl.store(dg + p_tk, b_dg, mask=m_tk)
    b_dk += b_dkgb * b_ge
    tl.store(dk + p_tk, b_dk, mask=m_tk)

    # the dv terms of every NK-th V block, starting at this program's slice index
    for i_v in range(i_k, tl.cdiv(V, BV), NK):
        o_v = i_v * BV + tl.arange(0, BV)
        m_tv = m_t[:, None] & (o_v < V)[None, :]
        p_tv = o_t[:, None] * SV + o_v[None, :]
        b_dv = tl.load(dv + p_tv, mask=m_tv, other=0.0)
        b_v = tl.load(v + p_tv, mask=m_tv, other=0.0)
        b_dA = tl.dot(b_dv, tl.trans(b_v), b_dA)
        b_dvb = tl.dot(b_At, b_dv)
        tl.store(dv2 + p_tv, (b_dvb * b_beta[:, None]).to(dv2.dtype.element_ty), mask=m_tv)
        b_db += tl.sum(b_dvb * b_v.to(tl.float32), axis=1)

    # this program's parts of dA and db (part 0 in dA and db themselves, the others in
    # scratch); the chunk's last program to arrive adds them in part order and finishes
    slot = i_tg * HV + i_hv
    p_dA = dA + (bos * HV + i_hv) * BT + o_t[:, None] * SA + o_c[None, :]
    p_db = db + bos * HV + i_hv + o_t * HV
    o_part = o_c[:, None] * BT + o_c[None, :]
    if i_k == 0:
        tl.store(p_dA, b_dA, mask=m_t[:, None])
        tl.store(p_db, b_db, mask=m_t)
    else:
        tl.store(dA_part + ((i_k - 1) * NTG * HV + slot) * BT * BT + o_part, b_dA)
        tl.store(db_part + ((i_k - 1) * NTG * HV + slot) * BT + o_c, b_db)
    tl.debug_barrier()
    arrived = tl.atomic_add(counter + slot, 1, sem="acq_rel", scope="gpu")
    if arrived == NK - 1:
        b_dA = tl.load(p_dA, mask=m_t[:, None], other=0.0, cache_modifier=".cg")
        b_db = tl.load(p_db, mask=m_t, other=0.0, cache_modifier=".cg")
        for j in tl.static_range(1, NK):
            b_dA += tl.load(
                dA_part + ((j - 1) * NTG * HV + slot) * BT * BT + o_part, cache_modifier=".cg"
            )
            b_db += tl.load(db_part + ((j - 1) * NTG * HV + slot) * BT + o_c, cache_modifier=".cg")
        m_A = (o_t[:, None] > o_t[None, :]) & m_t[:, None] & m_t[None, :]
        b_dA = tl.where(m_A, b_dA * b_beta[None, :], 0.0)
        b_dA = tl.dot(b_dA.to(b_At.dtype), b_At)
        b_dA = tl.dot(b_At, b_dA.to(b_At.dtype))
        b_dA = tl.where(m_A, -b_dA, 0.0)
        tl.store(p_dA, b_dA, mask=m_t[:, None])
        tl.store(p_db, b_db, mask=m_t)


def kda_bwd_wy(q, k, v, v_new, g, beta, A, h, do, dh, dv, scale, cu_seqlens=None,
               chunk_indices=None):  # fmt: skip
    """(dq, dk, dv2, db, dg, dA) of the fused WY stage, as fla 0.6.0's
    ``chunk_kda_bwd_wy_dqkg_fused`` returns them (state_v_first layout of h and dh): dq, dk,
    dg fp32 [B, T, HV, K]; dv2 like v; db fp32 beta's shape; dA fp32 [B, T, HV, 64]. Shapes of
    the inputs in the module docstring; chunk_indices is required with cu_seqlens (fla's
    prepare_chunk_indices(cu_seqlens, 64)). Raises ValueError for a chunk size other than 64
    or K, V beyond one program's reach (K > 256, V > 512)."""
    B, T, H, Kd = k.shape
    HV, Vd = v.shape[2], v.shape[3]
    if A.shape[-1] != BT:
        raise ValueError(f"the WY stage takes 64-token chunks; A has {A.shape[-1]} columns")
    if Kd > 256 or Vd > 512:
        raise ValueError(f"K {Kd} > 256 or V {Vd} > 512: outside what this stage was built for")
    NT = triton.cdiv(T, BT) if cu_seqlens is None else len(chunk_indices)
    NTG = B * NT if cu_seqlens is None else NT
    NK = triton.cdiv(Kd, BK)
    dq = g.new_empty(B, T, HV, Kd, dtype=torch.float)
    dk = torch.empty_like(dq)
    dg = torch.empty_like(dq)
    dv2 = torch.empty_like(v)
    db = torch.empty_like(beta, dtype=torch.float)
    dA = torch.empty_like(A, dtype=torch.float)
    dA_part = g.new_empty(max(NK - 1, 1), NTG, HV, BT, BT, dtype=torch.float)
    db_part = g.new_empty(max(NK - 1, 1), NTG, HV, BT, dtype=torch.float)
    counter = torch.zeros(NTG * HV, dtype=torch.int32, device=g.device)
    kda_bwd_wy_kernel[(NK * NT, B * HV)](
        q, k, v, v_new, g, beta, A, h, do, dh, dv, dq, dk, dv2, dg, db, dA, dA_part, db_part,
        counter, cu_seqlens, chunk_indices, scale, T, NTG, H=H, HV=HV, K=Kd, V=Vd, BT=BT,
        BK=BK, BV=BV, NK=NK, IS_VARLEN=cu_seqlens is not None, NUM_STAGES=NUM_STAGES,
        num_warps=NUM_WARPS,
    )  # fmt: skip
    return dq, dk, dv2, db, dg, dA
