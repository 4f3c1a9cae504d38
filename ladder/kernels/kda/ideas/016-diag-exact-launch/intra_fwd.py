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
sums are fp32). The anchor is the sub-chunk's first row, which depends on no later
token, so row i's scores are computed from rows <= i alone (no later gate leaks into them
through rounding).

Range: each factor stays inside 2^(+-LIMIT) (LIMIT 112 log2 units, 77.6 nat, keeps a
factor's tf32x3 low part a normal number and the sums far from fp32's 2^128). A row whose
exponent |g_i - g_a| passes LIMIT in any column, or any row after it in its sub-chunk, is
computed exactly instead (one exp2 per pair and column, at most 1 for a non-increasing gate,
fla's arithmetic); the choice is per row, so it too reads no later row. The layer's default
(non-safe) gate can fall past 80 nat in 16 tokens, so both paths run in practice; no gate
depth overflows.

The exact rows are a second launch (kda/012 ran them in the products' kernel, one column j
at a time): ``kda_fwd_diag_kernel`` writes every row's products and, per tile, the first row
past the range (BC for none) into an int32 buffer; ``kda_fwd_diag_exact_kernel``, on the same
grid, returns at once for a tile with none, and otherwise takes the tile's [16, 16,
EXACT_BK] exponents per step of K (masked to j <= i, summed over the step's columns into two
[16, 16] fp32 accumulators) on EXACT_WARPS warps and overwrites the exact rows. So the
products' kernel keeps its registers (kda/015 held both paths in one kernel and lost a third
of its programs per SM), and the exact tiles get warps of their own.

Shapes: q, k [B, T, H, K] (L2-normalised; bf16/fp16/fp32); v [B, T, HV, V]; g
[B, T, HV, K] fp32; beta [B, T, HV]; HV a multiple of H. A packed batch has B == 1,
cu_seqlens [N + 1] and fla's chunk_indices [NT, 2]. Chunk size 64, sub-chunk 16.

The products walk K in blocks of BK columns, two [16, BK] x [BK, 16] tf32x3 products per
block into two [16, 16] fp32 accumulators. All of K in one block does not fit: at K 128 a
static sm90 compile takes 255 registers and 224 bytes of stack per thread at 4 warps (the
M = 16 product operand is replicated in every warp), and BK 16 at 1 warp takes 98
registers and no stack, 19 programs per SM (kda/012's NOTES.md has the launch sweep).

Env knobs: KDA_FWDDIAG16_BK (the products' K block, a power of two >= 16, default 32),
KDA_FWDDIAG16_WARPS (the products' warps per program, default 1), KDA_FWDDIAG16_STAGES (the
products' K loop's pipeline stages, default 2): kda/012's record values;
KDA_FWDDIAG16_EXACT_BK (the exact launch's K step, a power of two, default 8) and
KDA_FWDDIAG16_EXACT_WARPS (its warps per program, default 4).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

BK = int(os.environ.get("KDA_FWDDIAG16_BK", "32"))
NUM_WARPS = int(os.environ.get("KDA_FWDDIAG16_WARPS", "1"))
NUM_STAGES = int(os.environ.get("KDA_FWDDIAG16_STAGES", "2"))
EXACT_BK = int(os.environ.get("KDA_FWDDIAG16_EXACT_BK", "8"))
EXACT_WARPS = int(os.environ.get("KDA_FWDDIAG16_EXACT_WARPS", "4"))

BT = 64
BC = 16
LIMIT = 112.0

__all__ = ["BC", "BT", "LIMIT", "fwd_intra"]


@triton.jit(do_not_specialize=["T"])
def kda_fwd_diag_kernel(
    q, k, g, beta, Aqk, Akkd, First, cu_seqlens, chunk_indices, scale, T,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, BK: tl.constexpr, BT: tl.constexpr,
    BC: tl.constexpr, LIMIT: tl.constexpr, IS_VARLEN: tl.constexpr,
):  # fmt: skip
    """One program: sub-chunk i_i of chunk i_t (of batch row i_b, or of chunk_indices' list),
    value head i_hv. Writes the sub-chunk's diagonal tile of Aqk (scaled, 0 above the
    diagonal) and of A into Akkd (fp32, strictly lower, 0 elsewhere) from the products, and
    into First the tile's first row past the products' range (BC for none), whose rows and
    every later one's ``kda_fwd_diag_exact_kernel`` then overwrites."""
    i_tile = (tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)) * tl.num_programs(2)
    p_first = First + i_tile + tl.program_id(2)
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
    if i0 >= L:  # past the sequence's end: no rows, none for the exact launch
        tl.store(p_first, BC)
        return

    SQK: tl.constexpr = H * K
    SG: tl.constexpr = HV * K
    q += (bos * H + i_h) * K
    k += (bos * H + i_h) * K
    g += (bos * HV + i_hv) * K
    beta += bos * HV + i_hv
    Aqk += (bos * HV + i_hv) * BT
    Akkd += (bos * HV + i_hv) * BC

    o_i = tl.arange(0, BC)
    rows = i0 + o_i
    m_r = rows < L
    b_b = tl.load(beta + rows * HV, mask=m_r, other=0.0).to(tl.float32)
    b_aq = tl.zeros([BC, BC], dtype=tl.float32)
    b_ak = tl.zeros([BC, BC], dtype=tl.float32)
    b_bad = tl.zeros([BC], dtype=tl.int32)
    for i_k in range(0, tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        m_rk = m_r[:, None] & m_k[None, :]
        b_q = tl.load(q + rows[:, None] * SQK + o_k[None, :], mask=m_rk, other=0.0)
        b_k = tl.load(k + rows[:, None] * SQK + o_k[None, :], mask=m_rk, other=0.0)
        b_g = tl.load(g + rows[:, None] * SG + o_k[None, :], mask=m_rk, other=0.0)
        b_ga = tl.load(g + i0 * SG + o_k, mask=m_k, other=0.0)  # the anchor: the first row
        b_x = tl.where(m_rk, b_g - b_ga[None, :], 0.0)  # row exponents (<= 0: non-increasing g)
        b_er = tl.exp2(b_x)
        b_kt = tl.trans(b_k.to(tl.float32) * tl.exp2(-b_x))  # key factors, >= 1
        b_aq += tl.dot(b_q.to(tl.float32) * b_er, b_kt, input_precision="tf32x3")
        b_ak += tl.dot(b_k.to(tl.float32) * b_er, b_kt, input_precision="tf32x3")
        b_bad |= (tl.max(tl.abs(b_x), axis=1) > LIMIT).to(tl.int32)

    m_le = o_i[None, :] <= o_i[:, None]
    m_lt = o_i[None, :] < o_i[:, None]
    p_aq = Aqk + rows[:, None] * (HV * BT) + (i_i * BC + o_i)[None, :]
    p_ak = Akkd + rows[:, None] * (HV * BC) + o_i[None, :]
    b_aq = tl.where(m_le, b_aq * scale, 0.0)
    tl.store(p_aq, b_aq.to(Aqk.dtype.element_ty), mask=m_r[:, None])
    tl.store(p_ak, tl.where(m_lt, b_ak * b_b[:, None], 0.0), mask=m_r[:, None])

    # the first row past the range: it and every later row of the tile are the exact launch's
    b_first = tl.min(tl.where((b_bad > 0) & m_r, o_i, BC), axis=0)
    tl.store(p_first, b_first)


@triton.jit(do_not_specialize=["T"])
def kda_fwd_diag_exact_kernel(
    q, k, g, beta, Aqk, Akkd, First, cu_seqlens, chunk_indices, scale, T,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr,
    EXACT_BK: tl.constexpr, IS_VARLEN: tl.constexpr,
):  # fmt: skip
    """One program per tile, on ``kda_fwd_diag_kernel``'s grid: nothing for a tile whose First
    is BC; otherwise its rows from First on, exactly (one exp2 per pair and column), over
    what the products wrote there."""
    i_t, i_i, i_bh = tl.program_id(0).to(tl.int64), tl.program_id(1), tl.program_id(2)
    i_tile = (tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)) * tl.num_programs(2)
    first = tl.load(First + i_tile + tl.program_id(2))
    if first >= BC:
        return
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

    SQK: tl.constexpr = H * K
    SG: tl.constexpr = HV * K
    q += (bos * H + i_h) * K
    k += (bos * H + i_h) * K
    g += (bos * HV + i_hv) * K
    beta += bos * HV + i_hv
    Aqk += (bos * HV + i_hv) * BT
    Akkd += (bos * HV + i_hv) * BC

    o_i = tl.arange(0, BC)
    rows = i0 + o_i
    m_r = rows < L
    b_b = tl.load(beta + rows * HV, mask=m_r, other=0.0).to(tl.float32)
    m_le = o_i[None, :] <= o_i[:, None]
    m_lt = o_i[None, :] < o_i[:, None]
    m_ij = m_le & m_r[:, None] & m_r[None, :]
    c_q = tl.zeros([BC, BC], dtype=tl.float32)
    c_k = tl.zeros([BC, BC], dtype=tl.float32)
    for i_k in range(0, tl.cdiv(K, EXACT_BK)):
        o_k = i_k * EXACT_BK + tl.arange(0, EXACT_BK)
        m_k = o_k < K
        m_rk = m_r[:, None] & m_k[None, :]
        b_q = tl.load(q + rows[:, None] * SQK + o_k[None, :], mask=m_rk, other=0.0)
        b_k = tl.load(k + rows[:, None] * SQK + o_k[None, :], mask=m_rk, other=0.0)
        b_g = tl.load(g + rows[:, None] * SG + o_k[None, :], mask=m_rk, other=0.0)
        m_e = m_ij[:, :, None] & m_k[None, None, :]
        b_e = tl.exp2(tl.where(m_e, b_g[:, None, :] - b_g[None, :, :], -float("inf")))
        b_ke = b_k.to(tl.float32)[None, :, :] * b_e  # [i, j, k]: k_jk 2^(g_ik - g_jk), 0 for j > i
        c_q += tl.sum(b_q.to(tl.float32)[:, None, :] * b_ke, axis=2)
        c_k += tl.sum(b_k.to(tl.float32)[:, None, :] * b_ke, axis=2)
    m_s = ((o_i >= first) & m_r)[:, None]
    p_aq = Aqk + rows[:, None] * (HV * BT) + (i_i * BC + o_i)[None, :]
    p_ak = Akkd + rows[:, None] * (HV * BC) + o_i[None, :]
    tl.store(p_aq, tl.where(m_le, c_q * scale, 0.0).to(Aqk.dtype.element_ty), mask=m_s)
    tl.store(p_ak, tl.where(m_lt, c_k * b_b[:, None], 0.0), mask=m_s)


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
        first = torch.empty(NT * NC * B * HV, device=k.device, dtype=torch.int32)
        kda_fwd_diag_kernel[(NT, NC, B * HV)](
            q, k, g, beta, Aqk, Akkd, first, cu_seqlens, chunk_indices, scale, T, H=H, HV=HV,
            K=K, BK=min(BK, triton.next_power_of_2(K)), BT=BT, BC=BC, LIMIT=LIMIT,
            IS_VARLEN=cu_seqlens is not None, num_warps=NUM_WARPS,
            num_stages=NUM_STAGES,
        )  # fmt: skip
        kda_fwd_diag_exact_kernel[(NT, NC, B * HV)](
            q, k, g, beta, Aqk, Akkd, first, cu_seqlens, chunk_indices, scale, T, H=H, HV=HV,
            K=K, BT=BT, BC=BC, EXACT_BK=min(EXACT_BK, triton.next_power_of_2(K)),
            IS_VARLEN=cu_seqlens is not None, num_warps=EXACT_WARPS,
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
