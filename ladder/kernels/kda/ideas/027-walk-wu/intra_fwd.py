"""The forward's intra-chunk stage of kda/027: kda/022's diagonal-tile kernel, writing beside
qg the two key-side operands of fla's w/u kernel, and fla's off-diagonal/solve kernel at
kda/024's fixed launch. fla's w/u kernel does not run: the state walk (``fwd.py``) forms w and
u from these operands itself.

fla's w/u kernel (``recompute_w_u_fwd_kda_kernel``, 1.80 ms of kda/024's 8.97 ms forward at
prod on an H100, ``docs/results/profile-kda-024-h100-20261206.txt``) reads k, v, beta, the
gate tile and the solved A of every chunk and writes

    w  = A (k beta 2^g)           [BT, K]   (k beta 2^g rounded to k's dtype first)
    u  = A (v beta)               [BT, V]   (v beta rounded to v's dtype first)
    kg = k 2^(g_last - g)         [BT, K]   (0 on rows past the sequence's end)

each rounded to its input's dtype; the state walk reads them back. kda/022's diagonal kernel
already loads each row's k, beta and gate tile once per (sub-chunk, value head, K block) and
forms 2^g for qg. Here it also stores kb = k beta 2^g and kg (one more exp2, the chunk's
last gate row, two bf16 stores per element), with fla's arithmetic in fla's order, so kb and
kg are fla's operands to the bit; the products with A move into the walk, which loads v, A
and beta per chunk instead of w and u. The rest is kda/022's kernel as it is (the anchored
products, the exact loop, the same stores).

With ``safe_gate`` the stage is fla's (``fwd_intra`` is not called: kernel.py runs kda/025's
chain there).

Env knobs: kda/012's (``i012.intra_fwd``: KDA_FWDDIAG_BK, KDA_FWDDIAG_WARPS,
KDA_FWDDIAG_STAGES), whose values this kernel is launched at; kda/024's ``launch.py`` for the
solve. None of its own.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from ladder.kernels.kda.ideas.i012 import intra_fwd as i12
from ladder.kernels.kda.ideas.i019 import intra_fwd as i19
from ladder.kernels.kda.ideas.i024 import launch

__all__ = ["LIMIT", "fwd_intra", "kda_fwd_diag_kernel"]

LIMIT = i12.LIMIT  # the products' range (kda/012's value; a test may set it)
BK, NUM_WARPS, NUM_STAGES = i12.BK, i12.NUM_WARPS, i12.NUM_STAGES


@triton.jit(do_not_specialize=["T"])
def kda_fwd_diag_kernel(
    q, k, g, beta, Aqk, Akkd, qg, kb, kg, cu_seqlens, chunk_indices, scale, T,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, BK: tl.constexpr, BT: tl.constexpr,
    BC: tl.constexpr, LIMIT: tl.constexpr, IS_VARLEN: tl.constexpr,
):  # fmt: skip
    """One program: sub-chunk i_i of chunk i_t (of batch row i_b, or of chunk_indices' list),
    value head i_hv. Writes kda/022's outputs (the sub-chunk's diagonal tiles of Aqk and
    Akkd, its rows of qg) and its rows of kb = k beta 2^g and kg = k 2^(g_last - g)."""
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
    last = tl.minimum(i_t * BT + BT, L) - 1  # the chunk's last row (its gate is g_last)

    SQK: tl.constexpr = H * K
    SG: tl.constexpr = HV * K
    q += (bos * H + i_h) * K
    k += (bos * H + i_h) * K
    g += (bos * HV + i_hv) * K
    beta += bos * HV + i_hv
    Aqk += (bos * HV + i_hv) * BT
    Akkd += (bos * HV + i_hv) * BC
    qg += (bos * HV + i_hv) * K
    kb += (bos * HV + i_hv) * K
    kg += (bos * HV + i_hv) * K

    o_i = tl.arange(0, BC)
    rows = i0 + o_i
    m_r = rows < L
    b_braw = tl.load(beta + rows * HV, mask=m_r, other=0.0)  # in beta's dtype, as fla's kb
    b_b = b_braw.to(tl.float32)
    b_aq = tl.zeros([BC, BC], dtype=tl.float32)
    b_ak = tl.zeros([BC, BC], dtype=tl.float32)
    b_bad = tl.zeros([BC], dtype=tl.int32)
    for i_k in range(0, tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        m_rk = m_r[:, None] & m_k[None, :]
        p_rk = rows[:, None] * SG + o_k[None, :]
        b_q = tl.load(q + rows[:, None] * SQK + o_k[None, :], mask=m_rk, other=0.0)
        b_k = tl.load(k + rows[:, None] * SQK + o_k[None, :], mask=m_rk, other=0.0)
        b_g = tl.load(g + p_rk, mask=m_rk, other=0.0)
        b_eg = tl.exp2(b_g)
        # fla's w/u kernel's operands, formed as it forms them: q 2^g, (k beta) 2^g and
        # k 2^(g_last - g), each rounded to its tensor's dtype
        tl.store(qg + p_rk, (b_q.to(tl.float32) * b_eg).to(qg.dtype.element_ty), mask=m_rk)
        b_kb = b_k * b_braw[:, None]
        b_kb *= b_eg
        tl.store(kb + p_rk, b_kb.to(kb.dtype.element_ty), mask=m_rk)
        b_gn = tl.load(g + last * SG + o_k, mask=m_k, other=0.0)
        b_kgn = b_k * tl.where(m_r[:, None], tl.exp2(b_gn[None, :] - b_g), 0.0)
        tl.store(kg + p_rk, b_kgn.to(kg.dtype.element_ty), mask=m_rk)
        # kda/022's (kda/012's) anchored diagonal products from here
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

    # rows past the range, and every later row of the sub-chunk: exact, one exp2 per pair
    b_bad = (tl.cumsum(b_bad, axis=0) > 0) & m_r
    if tl.max(b_bad.to(tl.int32), axis=0) > 0:
        tl.debug_barrier()
        for jj in range(0, tl.minimum(BC, L - i0)):
            c_q = tl.zeros([BC], dtype=tl.float32)
            c_k = tl.zeros([BC], dtype=tl.float32)
            for i_k in range(0, tl.cdiv(K, BK)):
                o_k = i_k * BK + tl.arange(0, BK)
                m_k = o_k < K
                m_e = ((o_i >= jj) & m_r)[:, None] & m_k[None, :]
                b_q = tl.load(q + rows[:, None] * SQK + o_k[None, :], mask=m_e, other=0.0)
                b_k = tl.load(k + rows[:, None] * SQK + o_k[None, :], mask=m_e, other=0.0)
                b_g = tl.load(g + rows[:, None] * SG + o_k[None, :], mask=m_e, other=0.0)
                b_kj = tl.load(k + (i0 + jj) * SQK + o_k, mask=m_k, other=0.0).to(tl.float32)
                b_gj = tl.load(g + (i0 + jj) * SG + o_k, mask=m_k, other=0.0)
                b_e = tl.exp2(tl.where(m_e, b_g - b_gj[None, :], -float("inf")))
                b_ke = b_kj[None, :] * b_e
                c_q += tl.sum(b_q.to(tl.float32) * b_ke, axis=1)
                c_k += tl.sum(b_k.to(tl.float32) * b_ke, axis=1)
            m_s = b_bad & (o_i >= jj)
            tl.store(Aqk + rows * (HV * BT) + i_i * BC + jj, (c_q * scale).to(Aqk.dtype.element_ty),
                     mask=m_s)  # fmt: skip
            tl.store(Akkd + rows * (HV * BC) + jj, tl.where(o_i > jj, c_k * b_b, 0.0), mask=m_s)


def fwd_intra(q, k, v, g, beta, scale, cu_seqlens=None, chunk_indices=None):
    """(qg, kb, kg, Aqk, Akk) of the non-safe gate's intra-chunk stage (module docstring).

    q, k: [B, T, H, K] L2-normalised; v: [B, T, HV, V] (only checked: the walk reads it);
    g: [B, T, HV, K] fp32 gate cumsum in log2 units (chunk 64); beta: [B, T, HV] (the
    chain's, fp32 after the sigmoid); scale: float; cu_seqlens [N + 1] with B == 1 and
    chunk_indices [NT, 2] (fla's, for chunk 64) for a packed batch. Returns qg = q 2^g,
    kb = k beta 2^g and kg = k 2^(g_last - g), [B, T, HV, K] in k's dtype (rows past a packed
    batch's last sequence unwritten), and Aqk (scaled, lower) and Akk (the solved
    (I + tril(beta k k^T))^-1, fla's ``Akk``) [B, T, HV, 64] in k's dtype. Raises ValueError
    for mismatched shapes, HV not a multiple of H, a g that is not fp32, or a packed batch
    without chunk_indices (``i019.checked``)."""
    q, k, v, g, beta, cu_seqlens, chunk_indices = i19.checked(
        q, k, v, g, beta, cu_seqlens, chunk_indices
    )
    B, T, H, K = k.shape
    HV = v.shape[2]
    BT, BC = i12.BT, i12.BC
    NT = triton.cdiv(T, BT) if cu_seqlens is None else chunk_indices.shape[0]
    Aqk = torch.empty(B, T, HV, BT, device=k.device, dtype=k.dtype)
    Akk = torch.zeros(B, T, HV, BT, device=k.device, dtype=k.dtype)  # the solve writes below
    Akkd = torch.empty(B, T, HV, BC, device=k.device, dtype=torch.float32)
    qg, kb, kg = (torch.empty(B, T, HV, K, device=k.device, dtype=k.dtype) for _ in range(3))
    if NT > 0:
        kda_fwd_diag_kernel[(NT, BT // BC, B * HV)](
            q, k, g, beta, Aqk, Akkd, qg, kb, kg, cu_seqlens, chunk_indices, scale, T, H=H,
            HV=HV, K=K, BK=min(BK, triton.next_power_of_2(K)), BT=BT, BC=BC, LIMIT=LIMIT,
            IS_VARLEN=cu_seqlens is not None, num_warps=NUM_WARPS, num_stages=NUM_STAGES,
        )  # fmt: skip
        launch.solve_launch(
            (NT, B * HV), q=q, k=k, g=g, beta=beta, Aqk=Aqk, Akkd=Akkd, Akk=Akk, scale=scale,
            cu_seqlens=cu_seqlens, chunk_indices=chunk_indices, T=T, H=H, HV=HV, K=K, BT=BT,
            BC=BC, NC=BT // BC, USE_SAFE_GATE=False, USE_GRAPH=False,
        )  # fmt: skip
    return qg, kb, kg, Aqk, Akk
