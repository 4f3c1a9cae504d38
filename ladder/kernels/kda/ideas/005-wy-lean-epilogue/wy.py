"""The fused WY / dq / dk / dg backward stage of chunk KDA: kda/004's split-K kernel with a
leaner epilogue.

The stage computes, for one 64-token chunk of one value head (chunk-local cumulative gate g
in log2 units, gn its last valid row; h, dh the chunk's state and state gradient [V, K]; A
the chunk's inverted [64, 64] WY matrix as the forward stored it; v_new the chunk's
corrected values):

    dq  = scale * exp2(g) * (do @ h)
    dk0 = exp2(gn - g) * (v_new @ dh)
    dw  = -(dv @ h)                      dkgb = A^T dw   (kg = k * exp2(g))
    dk  = dk0 + beta * exp2(g) * dkgb
    dg  = q * dq - k * dk0 + [last row] (exp2(gn) * sum_V h * dh + sum_t k * dk0)
          + beta * kg * dkgb
    dv2 = beta * (A^T dv),  db = sum_V (A^T dv) * v + sum_K dkgb * kg
    dA  = -tril_strict(A^T (tril_strict(beta_j * (dv @ v^T + dw @ kg^T)) A^T))

As in kda/004 (``../004-wy-split-k/wy.py``), each chunk's K is split over NK programs of BK
columns that each walk V once, and the last program of a chunk to finish adds the parts of
dA and db in a fixed order. What changes is the epilogue after the V loop, which in kda/004
fills the registers (aligned static sm90 compile at BK 64, BV 64, 4 warps: 255 registers and
488 bytes of stack per thread, against 162 for the loop alone; ``../004-wy-split-k/NOTES.md``):

- Two passes. The first finishes dq, dk0 and the dg terms that need only them, stores dq,
  dk0 (into dk) and dg, and releases the dq and dk accumulators. After a CTA barrier the
  second computes the WY terms from the dw accumulator (dkgb = A^T dw and its dA part) and
  adds them onto the stored dk and dg, which the program re-reads from L2. So at most one
  [64, BK] fp32 accumulator is live next to the WY products, where kda/004 holds up to three.
- 32-bit row offsets. Pointers are advanced to the chunk's first row once (64-bit); every
  per-element row offset inside the chunk is then a 32-bit int (kda/004 computes them from
  64-bit chunk indices, two registers per offset).
- ``KDA_WY_MAXNREG`` (0: Triton's default of 255) caps the registers per thread, so that
  more programs fit on an SM (3 of 4 warps at 168 or fewer) at the cost of spills.
- The wrapper checks what kda/004's trusted its caller for: contiguous inputs, a packed
  batch with B == 1 and its chunk_indices, HV a multiple of H, one h and dh per chunk.

Shapes: q, k [B, T, H, K] bf16; v, v_new, do, dv [B, T, HV, V] bf16; g [B, T, HV, K] fp32
(log2 units); beta [B, T, HV]; A [B, T, HV, 64] (q's dtype); h, dh [B*NT or NT, HV, V, K]
bf16 (state_v_first; [B, NT, HV, V, K] as fla's chain returns them is the same memory); out
dq, dk, dg [B, T, HV, K] fp32, dv2 like v, db beta's shape fp32, dA [B, T, HV, 64] fp32. A
packed batch has B == 1 and chunk_indices [(sequence, chunk)].
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

BK = int(os.environ.get("KDA_WY_BK", "64"))
BV = int(os.environ.get("KDA_WY_BV", "64"))
NUM_WARPS = int(os.environ.get("KDA_WY_WARPS", "4"))
NUM_STAGES = int(os.environ.get("KDA_WY_STAGES", "2"))
MAXNREG = int(os.environ.get("KDA_WY_MAXNREG", "0"))

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
    row0 = bos + i_t * BT  # the chunk's first row (64-bit, once)
    n = tl.minimum(eos - row0, BT).to(tl.int32)  # valid rows in this chunk

    SQK: tl.constexpr = H * K  # row strides
    SG: tl.constexpr = HV * K
    SV: tl.constexpr = HV * V
    SA: tl.constexpr = HV * BT
    q += (row0 * H + i_h) * K
    k += (row0 * H + i_h) * K
    g += (row0 * HV + i_hv) * K
    beta += row0 * HV + i_hv
    A += (row0 * HV + i_hv) * BT
    h += (i_tg * HV + i_hv) * K * V
    dh += (i_tg * HV + i_hv) * K * V
    voff = (row0 * HV + i_hv) * V
    v, v_new, do, dv, dv2 = v + voff, v_new + voff, do + voff, dv + voff, dv2 + voff
    koff = (row0 * HV + i_hv) * K
    dq, dk, dg = dq + koff, dk + koff, dg + koff

    # rows and columns inside the chunk: 32-bit from here on
    o_t = tl.arange(0, BT)
    m_t = o_t < n
    last = n - 1
    k0 = (i_k * BK).to(tl.int32)
    o_k = k0 + tl.arange(0, BK)
    m_k = o_k < K
    m_tk = m_t[:, None] & m_k[None, :]

    # dq, dk0 and dw over V; sum_V h * dh per K column
    b_dq = tl.zeros([BT, BK], dtype=tl.float32)
    b_dk = tl.zeros([BT, BK], dtype=tl.float32)
    b_dw = tl.zeros([BT, BK], dtype=tl.float32)
    b_dgk = tl.zeros([BK], dtype=tl.float32)
    for i_v in tl.range(0, tl.cdiv(V, BV), num_stages=NUM_STAGES):
        p_do = tl.make_block_ptr(do, (n, V), (SV, 1), (0, i_v * BV), (BT, BV), (1, 0))
        p_vn = tl.make_block_ptr(v_new, (n, V), (SV, 1), (0, i_v * BV), (BT, BV), (1, 0))
        p_dv = tl.make_block_ptr(dv, (n, V), (SV, 1), (0, i_v * BV), (BT, BV), (1, 0))
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

    # pass 1: dq, dk0 and the dg terms they give; the dq and dk accumulators end here
    p_tk = o_t[:, None] * SG + o_k[None, :]
    p_qk = o_t[:, None] * SQK + o_k[None, :]
    b_g = tl.load(g + p_tk, mask=m_tk, other=0.0).to(tl.float32)
    b_dq = b_dq * tl.exp2(b_g) * scale
    tl.store(dq + p_tk, b_dq, mask=m_tk)
    b_q = tl.load(q + p_qk, mask=m_tk, other=0.0).to(tl.float32)
    b_dg = b_q * b_dq
    b_gn = tl.load(g + last * SG + o_k, mask=m_k, other=0.0).to(tl.float32)
    b_dk = b_dk * tl.where(m_tk, tl.exp2(b_gn[None, :] - b_g), 0.0)
    b_k = tl.load(k + p_qk, mask=m_tk, other=0.0).to(tl.float32)
    b_kdk = b_k * b_dk
    b_dgk = b_dgk * tl.exp2(b_gn) + tl.sum(b_kdk, axis=0)
    b_dg -= b_kdk
    b_dg += (o_t == last)[:, None] * b_dgk[None, :]
    tl.store(dg + p_tk, b_dg, mask=m_tk)
    tl.store(dk + p_tk, b_dk, mask=m_tk)
    # the second pass re-reads dg and dk, which other threads of the program stored
    tl.debug_barrier()

    # pass 2: the WY terms from the dw accumulator, added onto the stored dk and dg
    b_ge = tl.exp2(tl.load(g + p_tk, mask=m_tk, other=0.0).to(tl.float32))
    b_kg = tl.load(k + p_qk, mask=m_tk, other=0.0).to(tl.float32) * b_ge
    # A transposed: b_At[i, j] = A[j, i]
    o_c = tl.arange(0, BT)
    b_At = tl.load(A + o_c[:, None] + o_t[None, :] * SA, mask=m_t[None, :], other=0.0)
    b_dwn = (-b_dw).to(b_At.dtype)
    b_dA = tl.dot(b_dwn, tl.trans(b_kg.to(b_At.dtype)))
    b_dkgb = tl.dot(b_At, b_dwn)
    b_db = tl.sum(b_dkgb * b_kg, axis=1)
    b_beta = tl.load(beta + o_t * HV, mask=m_t, other=0.0).to(tl.float32)
    b_dkgb *= b_beta[:, None]
    b_dg = tl.load(dg + p_tk, mask=m_tk, other=0.0) + b_kg * b_dkgb
    tl.store(dg + p_tk, b_dg, mask=m_tk)
    b_dk = tl.load(dk + p_tk, mask=m_tk, other=0.0) + b_dkgb * b_ge
    tl.store(dk + p_tk, b_dk, mask=m_tk)

    # the dv terms of every NK-th V block, starting at this program's slice index
    for i_v in range(i_k, tl.cdiv(V, BV), NK):
        o_v = tl.cast(i_v * BV, tl.int32) + tl.arange(0, BV)
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
    p_dA = dA + (row0 * HV + i_hv) * BT + o_t[:, None] * SA + o_c[None, :]
    p_db = db + row0 * HV + i_hv + o_t * HV
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


def _check(q, k, v, v_new, g, beta, A, h, do, dh, dv, cu_seqlens, chunk_indices) -> int:
    """The number of chunks of the call, after checking what the kernel assumes; ValueError
    naming the first argument that breaks it."""
    B, T, H, K = k.shape
    HV, V = v.shape[2], v.shape[3]
    if A.shape[-1] != BT:
        raise ValueError(f"the WY stage takes 64-token chunks; A has {A.shape[-1]} columns")
    if K > 256 or V > 512:
        raise ValueError(f"K {K} > 256 or V {V} > 512: outside what this stage was built for")
    if HV % H:
        raise ValueError(f"HV {HV} is not a multiple of H {H}")
    want = {
        "q": (q, (B, T, H, K)), "k": (k, (B, T, H, K)), "v": (v, (B, T, HV, V)),
        "v_new": (v_new, (B, T, HV, V)), "do": (do, (B, T, HV, V)), "dv": (dv, (B, T, HV, V)),
        "g": (g, (B, T, HV, K)), "beta": (beta, (B, T, HV)), "A": (A, (B, T, HV, BT)),
    }  # fmt: skip
    for name, (t, shape) in want.items():
        if tuple(t.shape) != shape:
            raise ValueError(f"{name} is {tuple(t.shape)}, expected {shape}")
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous (the kernel computes row strides)")
    if cu_seqlens is None:
        NTG = B * triton.cdiv(T, BT)
    else:
        if B != 1 or chunk_indices is None:
            raise ValueError("a packed batch needs B == 1 and its chunk_indices")
        NTG = len(chunk_indices)
    for name, t in (("h", h), ("dh", dh)):
        # fla's chain returns [B, NT, HV, V, K]; one state per chunk either way
        if tuple(t.shape[-3:]) != (HV, V, K) or t.numel() != NTG * HV * V * K:
            raise ValueError(
                f"{name} must hold one [{HV}, {V}, {K}] state per chunk ({NTG} chunks, "
                f"state_v_first), got {tuple(t.shape)}"
            )
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous")
    return NTG


def kda_bwd_wy(q, k, v, v_new, g, beta, A, h, do, dh, dv, scale, cu_seqlens=None,
               chunk_indices=None):  # fmt: skip
    """(dq, dk, dv2, db, dg, dA) of the fused WY stage, as fla 0.6.0's
    ``chunk_kda_bwd_wy_dqkg_fused`` returns them (state_v_first layout of h and dh): dq, dk,
    dg fp32 [B, T, HV, K]; dv2 like v; db fp32 beta's shape; dA fp32 [B, T, HV, 64]. Shapes of
    the inputs in the module docstring; chunk_indices is required with cu_seqlens (fla's
    prepare_chunk_indices(cu_seqlens, 64)). Raises ValueError for a chunk size other than 64,
    K or V beyond one program's reach (K > 256, V > 512), HV not a multiple of H, a
    non-contiguous or misshapen input, or a packed batch without chunk_indices or with B > 1."""
    NTG = _check(q, k, v, v_new, g, beta, A, h, do, dh, dv, cu_seqlens, chunk_indices)
    B, T, H, Kd = k.shape
    HV, Vd = v.shape[2], v.shape[3]
    NT = NTG // B
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
    launch = {"num_warps": NUM_WARPS}
    if MAXNREG > 0:
        launch["maxnreg"] = MAXNREG
    kda_bwd_wy_kernel[(NK * NT, B * HV)](
        q, k, v, v_new, g, beta, A, h, do, dh, dv, dq, dk, dv2, dg, db, dA, dA_part, db_part,
        counter, cu_seqlens, chunk_indices, scale, T, NTG, H=H, HV=HV, K=Kd, V=Vd, BT=BT,
        BK=BK, BV=BV, NK=NK, IS_VARLEN=cu_seqlens is not None, NUM_STAGES=NUM_STAGES,
        **launch,
    )  # fmt: skip
    return dq, dk, dv2, db, dg, dA
