"""The backward intra-chunk stage of chunk KDA with the diagonal tiles on tensor cores at any
gate depth: kda/003's kernel, whose deep tiles took an exact serial loop, with those tiles
queued for a second launch that takes them as anchored products over segments of rows (the
rule of kda/017's forward diagonal kernel).

For one 64-token chunk of one value head, with g the chunk-local cumulative gate in log2
units, E(i, j) = exp2(g_i - g_j) per K column for j <= i, and the gradients dAqk, dAkk of the
chunk's [64, 64] score matrices:

    P_q[i]  = sum_{j <= i} dAqk[i, j] k_j E(i, j)        dq  += P_q
    P_k[i]  = sum_{j <= i} dAkk[i, j] k_j E(i, j)        db  += <P_k[i], k_i>,  dk += beta_i P_k[i]
    dkt[j]  = sum_{i >= j} (dAqk[i, j] q_i + dAkk[i, j] beta_i k_i) E(i, j)     dk += dkt
    dg     += q * P_q + (beta P_k - dkt) * k

``kda_bwd_intra_kernel`` is kda/003's: one program per 16-token sub-chunk and BK-wide slice
of K (fla's grid), pairs against earlier and later sub-chunks as anchored products, and a
diagonal tile whose gate range over the slice R = max over columns of (g_first - g_last) is
at most DIAG_RANGE (128) as two products anchored at the column midpoint. A deeper tile (the
non-safe gate at tens of nat per token), which kda/003 walked as two serial 16-step loops
with a [16, BK] exp2 per step, is appended to a queue (an int32 counter and list on the
device), and the program writes its outputs without the tile's diagonal terms. The kernel
keeps kda/003's registers (no deep path in it), so shapes with no deep tile run as
kda/014's.

``kda_bwd_intra_deep_kernel``, on a fixed grid (DEEP_PROGRAMS_PER_SM per SM), reads the
queue's length on the device (no host sync) and adds each queued tile's diagonal terms.
Its rows split into segments [a, b): a the first row past the previous segment's range and
b the first later row whose exponent g_i - g_a leaves [-SEG, RISE] in some column of the
slice (the first segment: [-SEG, SEG]). Per segment, with row factors 2^(g_i - g_a) on the
segment's rows (0 elsewhere) and column factors 2^(g_a - g_j) on every column:

    P[i in segment]  += rowf_i (dA @ (k colf))_i
    dkt[j]           += colf_j (dA^T @ ((q or beta k) rowf))_j

four tf32x3 [16, 16] x [16, BK] products. A column j < a has colf_j <= 2^RISE when the gate
did not rise by more than RISE since j (a non-increasing gate never does), and a product
lost to underflow is below 2^(RISE - 126); columns in the segment have colf within 2^+-SEG.
Column factors are clipped at 2^SEG: only columns past the segment reach the clip, and their
dA entries in the segment's rows are 0 (j > i). A segment whose earlier columns sit more
than RISE below its anchor (a gate that rises inside the tile), or a NaN gate, sends the
rows from its anchor on to kda/003's exact loops, restricted to them. A tile falling by d
log2 units over the slice takes about 1 + d / SEG passes. Each queued tile is one program's,
once, so the queue's order (atomic, so any) changes no output.

Shapes (per launch): q, k [B, T, H, K] bf16; g [B, T, HV, K] fp32 (log2 units); beta
[B, T, HV]; dAqk, dAkk [B, T, HV, 64] fp32; dq, dk, dg [B, T, HV, K] fp32 in, dq2, dk2, dg2
the same out; db2 [NK, B, T, HV] fp32 partial sums over K slices. A packed batch has B == 1
and chunk_indices [(sequence, chunk)] pairs.

Env knobs (read once at import; the first four are kda/014's record's launch of kda/003's
kernel):
    KDA_INTRA18_BK             K slice per program (default 32)
    KDA_INTRA18_WARPS          warps per program of the first launch (default 2)
    KDA_INTRA18_STAGES         its software-pipeline stages (default 2)
    KDA_INTRA18_MAXNREG        its registers per thread at most (default 128; 0: uncapped)
    KDA_INTRA18_DEEP_WARPS     warps per program of the deep tiles' launch (default 2)
    KDA_INTRA18_DEEP_PROGRAMS  its programs per SM (default 8)

A static sm90 compile at BK 32 and 2 warps (`tools/kda_wy_sass.py 014 018 --stage intra`):
the first launch takes 168 registers uncapped (kda/003's) and 136 bytes of stack at the cap
of 128 (kda/014's: 152); the deep tiles' kernel 255 registers, 4 programs per SM.
"""

from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

BK = int(os.environ.get("KDA_INTRA18_BK", "32"))
NUM_WARPS = int(os.environ.get("KDA_INTRA18_WARPS", "2"))
NUM_STAGES = int(os.environ.get("KDA_INTRA18_STAGES", "2"))
MAXNREG = int(os.environ.get("KDA_INTRA18_MAXNREG", "128"))
DEEP_WARPS = int(os.environ.get("KDA_INTRA18_DEEP_WARPS", "2"))
DEEP_PROGRAMS_PER_SM = int(os.environ.get("KDA_INTRA18_DEEP_PROGRAMS", "8"))

BT = 64
BC = 16
# Largest per-column gate range (log2 units) over one 16-token tile that the anchored
# products take: factors stay within 2^-64 .. 2^64, far from fp32's 2^127 after the dA and k
# factors and a 16-term sum. 128 log2 units is 88.7 nat per 16 tokens; the lower-bound gate
# (at most 5 nat per token, 115 log2 units per tile) always fits.
DIAG_RANGE = 128.0
# A deeper tile's segments: rows within 2^-SEG of their anchor (factors within 2^+-64, as
# kda/003's midpoint products), rising at most RISE above it after the first segment.
SEG = 64.0
RISE = 1.0

__all__ = [
    "BC",
    "BT",
    "DIAG_RANGE",
    "RISE",
    "SEG",
    "kda_bwd_intra",
    "kda_bwd_intra_deep_kernel",
    "kda_bwd_intra_kernel",
]


@triton.jit(do_not_specialize=["T"])
def kda_bwd_intra_kernel(
    q, k, g, beta, dAqk, dAkk, dq, dk, dg, dq2, dk2, dg2, db2, cu_seqlens, chunk_indices,
    T, NTOK,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr,
    BK: tl.constexpr, NC: tl.constexpr, NK: tl.constexpr, IS_VARLEN: tl.constexpr,
    DIAG_RANGE: tl.constexpr, Count, Queue,
):  # fmt: skip
    """kda/003's kernel, except that a diagonal tile past DIAG_RANGE is queued for
    ``kda_bwd_intra_deep_kernel`` (its index appended to Queue, Count advanced) and its
    diagonal terms left out of the outputs, which that kernel adds."""
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
    i_ti = i_t * BT + i_i * BC  # first row of this sub-chunk, sequence-local
    if i_ti >= L:
        return

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
    rows = i_ti + o_i
    m_r = rows < L
    m_rk = m_r[:, None] & m_k[None, :]
    n_sub = tl.minimum(NC, tl.cdiv(L - i_t * BT, BC))  # sub-chunks of this chunk with rows

    b_g = tl.load(g + rows[:, None] * SG + o_k[None, :], mask=m_rk, other=0.0)
    b_q = tl.load(q + rows[:, None] * SQK + o_k[None, :], mask=m_rk, other=0.0).to(tl.float32)
    b_k = tl.load(k + rows[:, None] * SQK + o_k[None, :], mask=m_rk, other=0.0).to(tl.float32)
    b_b = tl.load(beta + rows * HV, mask=m_r, other=0.0).to(tl.float32)

    # I's rows against the earlier sub-chunks, anchored at I's first row
    b_pq = tl.zeros([BC, BK], dtype=tl.float32)
    b_pk = tl.zeros([BC, BK], dtype=tl.float32)
    if i_i > 0:
        b_ga = tl.load(g + i_ti * SG + o_k, mask=m_k, other=0.0)
        for i_j in range(0, i_i):
            cols = i_t * BT + i_j * BC + o_i
            p_j = cols[:, None] * SQK + o_k[None, :]
            b_kj = tl.load(k + p_j, mask=m_k[None, :], other=0.0).to(tl.float32)
            b_gj = tl.load(g + cols[:, None] * SG + o_k[None, :], mask=m_k[None, :], other=0.0)
            b_kg = b_kj * tl.exp2(b_ga[None, :] - b_gj)
            p_a = rows[:, None] * SA + (i_j * BC + o_i)[None, :]
            b_aq = tl.load(dAqk + p_a, mask=m_r[:, None], other=0.0)
            b_ak = tl.load(dAkk + p_a, mask=m_r[:, None], other=0.0)
            b_pq = tl.dot(b_aq, b_kg, b_pq)
            b_pk = tl.dot(b_ak, b_kg, b_pk)
        b_e = tl.where(m_rk, tl.exp2(b_g - b_ga[None, :]), 0.0)
        b_pq *= b_e
        b_pk *= b_e

    # I's keys against the later sub-chunks, anchored at I's last row
    b_dkt = tl.zeros([BC, BK], dtype=tl.float32)
    if i_i < n_sub - 1:  # then I is whole: its last row is i_ti + BC - 1
        b_gl = tl.load(g + (i_ti + BC - 1) * SG + o_k, mask=m_k, other=0.0)
        for i_j in range(i_i + 1, n_sub):
            rj = i_t * BT + i_j * BC + o_i
            m_j = rj < L
            m_jk = m_j[:, None] & m_k[None, :]
            p_j = rj[:, None] * SQK + o_k[None, :]
            b_qj = tl.load(q + p_j, mask=m_jk, other=0.0).to(tl.float32)
            b_kj = tl.load(k + p_j, mask=m_jk, other=0.0).to(tl.float32)
            b_gj = tl.load(g + rj[:, None] * SG + o_k[None, :], mask=m_jk, other=0.0)
            b_bj = tl.load(beta + rj * HV, mask=m_j, other=0.0).to(tl.float32)
            b_f = tl.where(m_jk, tl.exp2(b_gj - b_gl[None, :]), 0.0)
            p_a = rj[:, None] * SA + (i_i * BC + o_i)[None, :]  # [later rows, I's columns]
            b_aq = tl.load(dAqk + p_a, mask=m_j[:, None], other=0.0)
            b_ak = tl.load(dAkk + p_a, mask=m_j[:, None], other=0.0)
            b_dkt = tl.dot(tl.trans(b_aq), b_qj * b_f, b_dkt)
            b_dkt = tl.dot(tl.trans(b_ak), b_kj * b_bj[:, None] * b_f, b_dkt)
        b_dkt *= tl.where(m_rk, tl.exp2(b_gl[None, :] - b_g), 0.0)

    # the diagonal tile
    m_d = (o_i[:, None] >= o_i[None, :]) & m_r[:, None] & m_r[None, :]
    p_d = rows[:, None] * SA + (i_i * BC + o_i)[None, :]
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
    else:  # deep: the second launch takes this tile's diagonal terms
        slot = tl.atomic_add(Count, 1)
        tl.store(Queue + slot, (tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)))

    p_o = rows[:, None] * SG + o_k[None, :]
    tl.store(db2 + rows * HV, tl.sum(b_pk * b_k, axis=1), mask=m_r)
    b_pk *= b_b[:, None]
    b_dq = tl.load(dq + p_o, mask=m_rk, other=0.0)
    tl.store(dq2 + p_o, b_pq + b_dq, mask=m_rk)
    b_dk = tl.load(dk + p_o, mask=m_rk, other=0.0)
    tl.store(dk2 + p_o, b_pk + b_dkt + b_dk, mask=m_rk)
    b_dg = tl.load(dg + p_o, mask=m_rk, other=0.0)
    tl.store(dg2 + p_o, b_q * b_pq + (b_pk - b_dkt) * b_k + b_dg, mask=m_rk)


@triton.jit(do_not_specialize=["T", "NTOK", "NBH"])
def kda_bwd_intra_deep_kernel(
    q, k, g, beta, dAqk, dAkk, dq2, dk2, dg2, db2, cu_seqlens, chunk_indices, T, NTOK, NBH,
    Count, Queue,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr,
    BK: tl.constexpr, NC: tl.constexpr, NK: tl.constexpr, IS_VARLEN: tl.constexpr,
    SEG: tl.constexpr, RISE: tl.constexpr,
):  # fmt: skip
    """A fixed grid over the queued deep tiles (Count of them in Queue, each once, so the
    order the first launch queued them in does not change any output): each tile's
    diagonal terms by segments, added to what ``kda_bwd_intra_kernel`` wrote."""
    n = tl.load(Count)
    for e in range(tl.program_id(0), n, tl.num_programs(0)):
        code = tl.load(Queue + e).to(tl.int64)
        pid, i_bh = code // NBH, code % NBH
        i_k, i_i, i_t = pid % NK, (pid // NK) % NC, pid // (NK * NC)
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
        SQK: tl.constexpr = H * K
        SG: tl.constexpr = HV * K
        SA: tl.constexpr = HV * BT
        p_q = q + (bos * H + i_h) * K
        p_k = k + (bos * H + i_h) * K
        p_g = g + (bos * HV + i_hv) * K
        p_b = beta + bos * HV + i_hv
        p_aq = dAqk + (bos * HV + i_hv) * BT
        p_ak = dAkk + (bos * HV + i_hv) * BT
        off = (bos * HV + i_hv) * K
        p_db = db2 + (i_k * NTOK + bos) * HV + i_hv

        o_i = tl.arange(0, BC)
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        rows = i_ti + o_i
        m_r = rows < L
        m_rk = m_r[:, None] & m_k[None, :]
        b_g = tl.load(p_g + rows[:, None] * SG + o_k[None, :], mask=m_rk, other=0.0)
        b_q = tl.load(p_q + rows[:, None] * SQK + o_k[None, :], mask=m_rk, other=0.0)
        b_q = b_q.to(tl.float32)
        b_k = tl.load(p_k + rows[:, None] * SQK + o_k[None, :], mask=m_rk, other=0.0)
        b_k = b_k.to(tl.float32)
        b_b = tl.load(p_b + rows * HV, mask=m_r, other=0.0).to(tl.float32)
        m_d = (o_i[:, None] >= o_i[None, :]) & m_r[:, None] & m_r[None, :]
        p_d = rows[:, None] * SA + (i_i * BC + o_i)[None, :]
        b_pq = tl.zeros([BC, BK], dtype=tl.float32)
        b_pk = tl.zeros([BC, BK], dtype=tl.float32)
        b_dkt = tl.zeros([BC, BK], dtype=tl.float32)

        # One pass per segment of rows, anchored at its first row: row factors 2^(g_i - g_a) on
        # the segment's rows (0 elsewhere), column factors 2^(g_a - g_j) on every column,
        # clipped at 2^SEG (only columns past the segment reach the clip, and their dA entries in
        # the segment's rows are 0)
        n_d = tl.minimum(BC, L - i_ti).to(tl.int32)
        a = tl.zeros([], dtype=tl.int32)
        ex = n_d  # the first row of the exact loops (n_d for none)
        while a < n_d:
            # the tile's dA loaded per pass (1 KB each, from cache after the first): kept from
            # before the loop, they and their tf32x3 operand forms stay live across it
            b_aq = tl.load(p_aq + p_d, mask=m_d, other=0.0)
            b_ak = tl.load(p_ak + p_d, mask=m_d, other=0.0)
            b_ga = tl.load(p_g + (i_ti + a) * SG + o_k, mask=m_k, other=0.0)
            b_x = tl.where(m_rk, b_g - b_ga[None, :], 0.0)
            m_nan = b_x != b_x  # a NaN gate ends a segment, and the segments at its row
            hi = tl.where(a == 0, SEG, RISE)  # the first segment has no earlier columns
            b_out = tl.max(((b_x < -SEG) | (b_x > hi) | m_nan).to(tl.int32), axis=1)
            b_low = tl.max(((b_x < -RISE) | m_nan).to(tl.int32), axis=1)
            nxt = tl.min(tl.where((o_i >= a) & m_r & (b_out > 0), o_i, n_d), axis=0)
            stop = (nxt == a) | (tl.max(tl.where(o_i < a, b_low, 0), axis=0) > 0)
            m_seg = (o_i >= a) & (o_i < tl.where(stop, a, nxt))
            b_ef = tl.where(m_seg[:, None] & m_rk, tl.exp2(tl.where(b_x > SEG, SEG, b_x)), 0.0)
            b_eb = tl.where(m_rk, tl.exp2(-tl.where(b_x < -SEG, -SEG, b_x)), 0.0)
            b_kc = b_k * b_eb
            b_pq += b_ef * tl.dot(b_aq, b_kc, input_precision="tf32x3")
            b_pk += b_ef * tl.dot(b_ak, b_kc, input_precision="tf32x3")
            b_t = tl.dot(tl.trans(b_aq), b_q * b_ef, input_precision="tf32x3")
            b_t = tl.dot(tl.trans(b_ak), b_k * b_b[:, None] * b_ef, b_t, input_precision="tf32x3")
            b_dkt += b_eb * b_t
            ex = tl.where(stop, a, ex)
            a = tl.where(stop, n_d, nxt)
        # rows from ex on (a gate rising past RISE inside the tile, or NaN): exact, one exp2
        # per pair (kda/003's loops, over those rows only)
        if ex < n_d:
            m_x = m_r & (o_i >= ex)
            for j in range(0, n_d):
                # column j of the tile against every row i >= max(j, ex)
                rj = i_ti + j
                m_c = m_x & (o_i >= j)
                c_q = tl.load(p_aq + rows * SA + i_i * BC + j, mask=m_c, other=0.0)
                c_k = tl.load(p_ak + rows * SA + i_i * BC + j, mask=m_c, other=0.0)
                k_j = tl.load(p_k + rj * SQK + o_k, mask=m_k, other=0.0).to(tl.float32)
                g_j = tl.load(p_g + rj * SG + o_k, mask=m_k, other=0.0)
                b_e = tl.exp2(tl.where(m_c[:, None] & m_rk, b_g - g_j[None, :], -float("inf")))
                b_ke = k_j[None, :] * b_e
                b_pq += c_q[:, None] * b_ke
                b_pk += c_k[:, None] * b_ke
            for i in range(ex, n_d):
                # row i of the tile against every column j <= i
                ri = i_ti + i
                r_q = tl.load(p_aq + ri * SA + i_i * BC + o_i, mask=(o_i <= i), other=0.0)
                r_k = tl.load(p_ak + ri * SA + i_i * BC + o_i, mask=(o_i <= i), other=0.0)
                q_i = tl.load(p_q + ri * SQK + o_k, mask=m_k, other=0.0).to(tl.float32)
                k_i = tl.load(p_k + ri * SQK + o_k, mask=m_k, other=0.0).to(tl.float32)
                b_i = tl.load(p_b + ri * HV).to(tl.float32)
                g_i = tl.load(p_g + ri * SG + o_k, mask=m_k, other=0.0)
                b_e = tl.exp2(
                    tl.where((o_i <= i)[:, None] & m_rk, g_i[None, :] - b_g, -float("inf"))
                )
                b_dkt += (r_q[:, None] * q_i[None, :] + r_k[:, None] * (b_i * k_i)[None, :]) * b_e

        # add the tile's diagonal terms to the first launch's outputs
        p_o = off + rows[:, None] * SG + o_k[None, :]
        b_db = tl.load(p_db + rows * HV, mask=m_r, other=0.0)
        tl.store(p_db + rows * HV, b_db + tl.sum(b_pk * b_k, axis=1), mask=m_r)
        b_pk *= b_b[:, None]
        b_x = tl.load(dq2 + p_o, mask=m_rk, other=0.0)
        tl.store(dq2 + p_o, b_x + b_pq, mask=m_rk)
        b_x = tl.load(dk2 + p_o, mask=m_rk, other=0.0)
        tl.store(dk2 + p_o, b_x + (b_pk + b_dkt), mask=m_rk)
        b_x = tl.load(dg2 + p_o, mask=m_rk, other=0.0)
        tl.store(dg2 + p_o, b_x + (b_q * b_pq + (b_pk - b_dkt) * b_k), mask=m_rk)


@functools.cache
def _sm_count(index: int | None) -> int:
    """SMs of CUDA device ``index`` (1 off the GPU), asked once per device."""
    if index is None:
        return 1
    return torch.cuda.get_device_properties(index).multi_processor_count


def kda_bwd_intra(q, k, g, beta, dAqk, dAkk, dq, dk, db, dg, cu_seqlens=None, chunk_indices=None):
    """(dq, dk, db, dg) after the intra-chunk terms, at this module's BK, warps and stages,
    the first launch under ``maxnreg=MAXNREG`` (none at 0). q, k [B, T, H, K] bf16; g
    [B, T, HV, K] fp32 chunk-local cumulative gate in log2 units; beta [B, T, HV]; dAqk, dAkk
    [B, T, HV, 64] fp32; dq, dk, dg [B, T, HV, K] fp32; db beta's shape fp32. chunk_indices
    is required with cu_seqlens (fla's prepare_chunk_indices(cu_seqlens, 64)); ValueError
    without it."""
    if cu_seqlens is not None and chunk_indices is None:
        raise ValueError("kda_bwd_intra: a packed batch (cu_seqlens) needs fla's chunk_indices")
    B, T, H, Kd = k.shape
    HV = g.shape[2]
    NK = triton.cdiv(Kd, BK)
    NC = BT // BC
    NT = triton.cdiv(T, BT) if cu_seqlens is None else len(chunk_indices)
    dq2, dk2 = torch.empty_like(dq), torch.empty_like(dk)
    dg2 = torch.empty_like(dg, dtype=torch.float32)
    db2 = torch.empty((NK, *beta.shape), dtype=torch.float32, device=beta.device)
    grid = (NK * NC * NT, B * HV)
    count = torch.zeros(1, dtype=torch.int32, device=k.device)
    queue = torch.empty(grid[0] * grid[1], dtype=torch.int32, device=k.device)
    launch = dict(num_warps=NUM_WARPS, num_stages=NUM_STAGES)
    if MAXNREG > 0:
        launch["maxnreg"] = MAXNREG
    shape = dict(H=H, HV=HV, K=Kd, BT=BT, BC=BC, BK=BK, NC=NC, NK=NK,
                 IS_VARLEN=cu_seqlens is not None)  # fmt: skip
    kda_bwd_intra_kernel[grid](
        q, k, g, beta, dAqk, dAkk, dq, dk, dg, dq2, dk2, dg2, db2, cu_seqlens, chunk_indices,
        T, B * T, **shape, DIAG_RANGE=DIAG_RANGE, Count=count, Queue=queue, **launch,
    )  # fmt: skip
    # a fixed grid reads the queue's length on the device: no host sync, and at a shape with
    # no deep tile each program loads one int32 and returns
    sms = _sm_count(k.device.index if k.is_cuda else None)
    kda_bwd_intra_deep_kernel[(sms * DEEP_PROGRAMS_PER_SM,)](
        q, k, g, beta, dAqk, dAkk, dq2, dk2, dg2, db2, cu_seqlens, chunk_indices, T, B * T,
        B * HV, count, queue, **shape, SEG=SEG, RISE=RISE, num_warps=DEEP_WARPS,
    )  # fmt: skip
    return dq2, dk2, db2.sum(0).add_(db), dg2
