"""The forward's intra-chunk stage of kda/017 (the diagonal tiles' rows past the first anchor's
range on further anchored passes) with its diagonal-tile kernel also writing the gated
queries qg = q * 2^g, for kda/019's state pass, as kda/022 does for kda/012's kernel.

After its passes over the segments (and the exact loop), the kernel walks K once more
through block pointers, loading the sub-chunk's q and gate tiles (just read by the passes,
so from L1/L2) and storing q * 2^g: one exp2 and one store per element. Storing from the
passes' own tiles costs registers instead (the kernel's comment has the static compiles).
Everything else is kda/017's kernel (the segments, the
bound on a rising gate, the exact loop) and, after it, fla's off-diagonal/solve kernel and
fla's w/u kernel without q, as kda/022 runs them. Rows of a packed batch past its last
sequence get no qg (no program covers them; the state pass reads none of them).

qg's rounding is fla's: q (bf16) in fp32 times ``exp2`` of the fp32 gate, rounded to k's
dtype, so the state pass's operands are those of kda/022 to the bit.

With ``safe_gate``, fla's ``chunk_kda_fwd_intra`` runs as kda/022 runs it (its w/u kernel
writes qg; ``disable_recompute=True`` asks for it).

Env knobs: kda/017's (``i017.intra_fwd``: KDA_FWDDIAG17_BK, KDA_FWDDIAG17_WARPS,
KDA_FWDDIAG17_STAGES), whose values this kernel is launched at (BK, NUM_WARPS, NUM_STAGES
here); none of its own.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from ladder.kernels.kda.ideas.i017 import intra_fwd as i17
from ladder.kernels.kda.ideas.i019 import intra_fwd as i19

__all__ = ["LIMIT", "RISE", "fwd_intra"]

LIMIT = i17.LIMIT  # the products' range (kda/017's value; a test may set it)
RISE = i17.RISE
# the launch: kda/017's knobs' values (a stage bench's --launch may set these)
BK, NUM_WARPS, NUM_STAGES = i17.BK, i17.NUM_WARPS, i17.NUM_STAGES


@triton.jit(do_not_specialize=["T"])
def kda_fwd_diag_kernel(
    q, k, g, beta, Aqk, Akkd, qg, cu_seqlens, chunk_indices, scale, T,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, BK: tl.constexpr, BT: tl.constexpr,
    BC: tl.constexpr, LIMIT: tl.constexpr, RISE: tl.constexpr, IS_VARLEN: tl.constexpr,
):  # fmt: skip
    """One program: sub-chunk i_i of chunk i_t (of batch row i_b, or of chunk_indices' list),
    value head i_hv. Writes the sub-chunk's diagonal tile of Aqk (scaled, 0 above the
    diagonal) and of A into Akkd (fp32, strictly lower, 0 elsewhere), one anchored segment
    of rows per pass, and the rows no segment may take by the exact loop; and, after them,
    the sub-chunk's rows of qg = q * 2^g (the value head's gate, in qg's dtype)."""
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
    qg += (bos + i0) * SG + i_hv * K

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

    # qg as fla's w/u kernel forms it (q in fp32 times 2^g, rounded to qg's dtype), in a K
    # loop of its own after the passes, through block pointers: a store inside the passes'
    # loop took 230 registers where kda/017 takes 168, and a loop of address tiles before or
    # after them 222 (the compiler keeps the address tiles it shares with the passes live
    # through them; static sm90 compiles at BK 32, 1 warp, 1 stage)
    for i_k in range(0, tl.cdiv(K, BK)):
        p_q = tl.make_block_ptr(q, (n_r, K), (SQK, 1), (0, i_k * BK), (BC, BK), (1, 0))
        p_g = tl.make_block_ptr(g, (n_r, K), (SG, 1), (0, i_k * BK), (BC, BK), (1, 0))
        p_qg = tl.make_block_ptr(qg, (n_r, K), (SG, 1), (0, i_k * BK), (BC, BK), (1, 0))
        b_q = tl.load(p_q, boundary_check=(0, 1)).to(tl.float32)
        b_qg = b_q * tl.exp2(tl.load(p_g, boundary_check=(0, 1)))
        tl.store(p_qg, b_qg.to(qg.dtype.element_ty), boundary_check=(0, 1))


def fwd_intra(q, k, v, g, beta, scale, cu_seqlens=None, chunk_indices=None, safe_gate=False):
    """(w, u, qg, kg, Aqk, Akk): kda/017's ``fwd_intra`` with qg written by the diagonal-tile
    kernel (module docstring).

    q, k: [B, T, H, K] L2-normalised; v: [B, T, HV, V]; g: [B, T, HV, K] fp32 gate cumsum in
    log2 units (chunk 64); beta: [B, T, HV]; scale: float; cu_seqlens [N + 1] with B == 1 and
    chunk_indices [NT, 2] (fla's, for chunk 64) for a packed batch. Returns w, qg, kg
    [B, T, HV, K] and u [B, T, HV, V] in k's / v's dtype (qg's rows past a packed batch's
    last sequence unwritten), Aqk and Akk [B, T, HV, 64] in k's dtype. Raises ValueError for
    mismatched shapes, HV not a multiple of H, a g that is not fp32, or a packed batch
    without chunk_indices (``i019.checked``)."""
    from fla.ops.kda.chunk_intra import chunk_kda_fwd_intra, chunk_kda_fwd_kernel_inter_solve_fused
    from fla.ops.kda.wy_fast import recompute_w_u_fwd

    if safe_gate:
        return chunk_kda_fwd_intra(
            q=q, k=k, v=v, gk=g, beta=beta, scale=scale, cu_seqlens=cu_seqlens,
            chunk_size=i17.BT, chunk_indices=chunk_indices, safe_gate=True,
            disable_recompute=True,
        )  # fmt: skip
    q, k, v, g, beta, cu_seqlens, chunk_indices = i19.checked(
        q, k, v, g, beta, cu_seqlens, chunk_indices
    )
    B, T, H, K = k.shape
    HV = v.shape[2]
    BT, BC = i17.BT, i17.BC
    NT = triton.cdiv(T, BT) if cu_seqlens is None else chunk_indices.shape[0]
    Aqk = torch.empty(B, T, HV, BT, device=k.device, dtype=k.dtype)
    Akk = torch.zeros(B, T, HV, BT, device=k.device, dtype=k.dtype)  # the solve writes below
    Akkd = torch.empty(B, T, HV, BC, device=k.device, dtype=torch.float32)
    qg = torch.empty(B, T, HV, K, device=k.device, dtype=k.dtype)
    if NT > 0:
        kda_fwd_diag_kernel[(NT, BT // BC, B * HV)](
            q, k, g, beta, Aqk, Akkd, qg, cu_seqlens, chunk_indices, scale, T, H=H, HV=HV, K=K,
            BK=min(BK, triton.next_power_of_2(K)), BT=BT, BC=BC, LIMIT=LIMIT, RISE=RISE,
            IS_VARLEN=cu_seqlens is not None, num_warps=NUM_WARPS, num_stages=NUM_STAGES,
        )  # fmt: skip
        chunk_kda_fwd_kernel_inter_solve_fused[(NT, B * HV)](
            q=q, k=k, g=g, beta=beta, Aqk=Aqk, Akkd=Akkd, Akk=Akk, scale=scale,
            cu_seqlens=cu_seqlens, chunk_indices=chunk_indices, T=T, H=H, HV=HV, K=K, BT=BT,
            BC=BC, NC=BT // BC, USE_SAFE_GATE=False, USE_GRAPH=False,
        )  # fmt: skip
    w, u, _, kg = recompute_w_u_fwd(
        k=k, v=v, beta=beta, A=Akk, q=None, gk=g, cu_seqlens=cu_seqlens,
        chunk_indices=chunk_indices,
    )  # fmt: skip
    return w, u, qg, kg, Aqk, Akk
