"""The forward's state pass and output of chunk KDA in one kernel, reading the gated queries
qg = q * 2^g from the w/u stage instead of q and the gate.

kda/008's ``chunk_kda_fwd_kernel_h_o`` walks each sequence's chunks for one (sequence, value
head, BV-wide block of V), holding the state S [BV, K] in fp32 registers, and per chunk of
BT = 64 rows computes

    v_new = u - w S^T                                  [BT, BV]
    o     = scale (q * 2^g) S^T + tril(Aqk) v_new      [BT, BV], stored
    S     = S * 2^g_last[None, :] + v_new^T kg         [BV, K]

reading, per V block, q (bf16) and the per-key gate cumsum g (fp32, [BT, K]) to form q * 2^g,
rounded to the inputs' dtype before its product (fla's rounding). At prod's launch (BV 128,
two V blocks) that gate tile is the largest read of the walk: 4 bytes per key column against
2 for q, w and kg each, read once per V block.

fla's w/u stage (``recompute_w_u_fwd``) already reads q's gate when it is given q, and writes
the same product rounded the same way (qg = q * 2^g in k's dtype; fla's backward asks for it
that way). Here the forward asks for it too, and the walk reads qg [B, T, HV, K] in place of
q and the gate tile; of the gate it reads only the chunk's last row (g_last, K values per
chunk). Per token and value head at prod (K 128, V 256, BV 128) the walk reads 2 x 6 x 128
bytes of key-side tiles instead of 2 x 10 x 128; the w/u stage reads q and writes qg, 2 x 256
bytes more. The rest is kda/008's: the same products in the same order, the same roundings
(S and v_new enter the products in the inputs' dtype), every exponent at most 0 (no
factorised exp(g_i - g_j), so the non-safe gate cannot overflow this stage), and the rows a
packed batch has past its last sequence zeroed by the last sequence's programs.

The state is two 64-wide K blocks, so K <= 128 runs here (``fwd_h_o`` says what runs above).

Env knobs: KDA_FWDHO19_BV (a power of two, at least 16, default 128), KDA_FWDHO19_WARPS
(default 8), KDA_FWDHO19_STAGES (default 2): kda/008's launch in kda/014's record.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

BV = int(os.environ.get("KDA_FWDHO19_BV", "128"))
NUM_WARPS = int(os.environ.get("KDA_FWDHO19_WARPS", "8"))
NUM_STAGES = int(os.environ.get("KDA_FWDHO19_STAGES", "2"))
MAX_K = 128  # the state is held as two 64-wide blocks of K

__all__ = ["MAX_K", "fwd_h_o"]


@triton.jit
def _tile(base, rows, m_rows, cols, m_cols, stride):
    """A [len(rows), len(cols)] tile of a row-major matrix with row stride `stride` (masked
    elements 0)."""
    return tl.load(
        base + rows[:, None] * stride + cols[None, :],
        mask=m_rows[:, None] & m_cols[None, :],
        other=0.0,
    )


@triton.jit(do_not_specialize=["T"])
def chunk_kda_fwd_kernel_h_o(
    qg, kg, w, u, gk, A, o, h0, ht, cu_seqlens, scale, T,
    HK: tl.constexpr, HV: tl.constexpr, K: tl.constexpr,
    V: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr,
    USE_INITIAL_STATE: tl.constexpr, STORE_FINAL_STATE: tl.constexpr,
    IS_VARLEN: tl.constexpr,
):  # fmt: skip
    """One program: sequence i_n, value head i_hv, V block i_v, every chunk of the sequence in
    order (module docstring). qg, w, gk [B, T, HV, K]; kg [B, T, HK, K]; u, o [B, T, HV, V];
    A [B, T, HV, BT]; h0, ht [N, HV, V, K] fp32."""
    pid = tl.program_id(0).to(tl.int64)
    NV = tl.cdiv(V, BV)
    i_v, i_nh = pid % NV, pid // NV
    i_n, i_hv = i_nh // HV, i_nh % HV
    T_all = T  # the batch's rows (a packed batch: every sequence's)
    if IS_VARLEN:
        bos = tl.load(cu_seqlens + i_n).to(tl.int64)
        eos = tl.load(cu_seqlens + i_n + 1).to(tl.int64)
        T = eos - bos
    else:
        bos = i_n * T
    NT = tl.cdiv(T, BT)

    qg += (bos * HV + i_hv) * K
    kg += (bos * HK + i_hv // (HV // HK)) * K
    w += (bos * HV + i_hv) * K
    gk += (bos * HV + i_hv) * K
    u += (bos * HV + i_hv) * V
    o += (bos * HV + i_hv) * V
    A += (bos * HV + i_hv) * BT

    o_v = i_v * BV + tl.arange(0, BV)
    m_v = o_v < V
    o_k1 = tl.arange(0, 64)
    m_k1 = o_k1 < K
    o_k2 = 64 + o_k1
    m_k2 = o_k2 < K
    o_i = tl.arange(0, BT)
    m_s = o_i[:, None] >= o_i[None, :]

    b_h1 = tl.zeros([BV, 64], dtype=tl.float32)
    b_h2 = tl.zeros([BV, 64], dtype=tl.float32)
    if USE_INITIAL_STATE:
        b_h1 += _tile(h0 + i_nh * V * K, o_v, m_v, o_k1, m_k1, K).to(tl.float32)
        if K > 64:
            b_h2 += _tile(h0 + i_nh * V * K, o_v, m_v, o_k2, m_k2, K).to(tl.float32)

    for i_t in range(NT):
        o_t = (i_t * BT + o_i).to(tl.int64)
        m_t = o_t < T
        # the state before this chunk, in the inputs' dtype (fla stores h so)
        b_s1 = tl.trans(b_h1).to(w.dtype.element_ty)
        if K > 64:
            b_s2 = tl.trans(b_h2).to(w.dtype.element_ty)
        # v_new = u - w S^T
        b_vn = tl.dot(_tile(w, o_t, m_t, o_k1, m_k1, HV * K), b_s1)
        if K > 64:
            b_vn = tl.dot(_tile(w, o_t, m_t, o_k2, m_k2, HV * K), b_s2, b_vn)
        b_vn = _tile(u, o_t, m_t, o_v, m_v, HV * V).to(tl.float32) - b_vn
        b_vn = b_vn.to(kg.dtype.element_ty)
        # o = scale qg S^T + tril(A) v_new, qg = q * 2^g as the w/u stage rounded it
        b_o = tl.dot(_tile(qg, o_t, m_t, o_k1, m_k1, HV * K), b_s1)
        if K > 64:
            b_o = tl.dot(_tile(qg, o_t, m_t, o_k2, m_k2, HV * K), b_s2, b_o)
        b_o *= scale
        b_A = _tile(A, o_t, m_t, o_i, o_i < BT, HV * BT)
        b_A = tl.where(m_s, b_A, 0.0).to(b_vn.dtype)
        b_o = tl.dot(b_A, b_vn, b_o)
        tl.store(
            o + o_t[:, None] * (HV * V) + o_v[None, :],
            b_o.to(o.dtype.element_ty),
            mask=m_t[:, None] & m_v[None, :],
        )
        # S = S * 2^g_last + v_new^T kg, g_last the gate cumsum at the chunk's last row
        p_gl = gk + tl.max(tl.where(m_t, o_t, 0), axis=0) * (HV * K)
        b_vt = tl.trans(b_vn)
        b_h1 *= tl.exp2(tl.load(p_gl + o_k1, mask=m_k1, other=0.0).to(tl.float32))[None, :]
        b_h1 = tl.dot(b_vt, _tile(kg, o_t, m_t, o_k1, m_k1, HK * K), b_h1)
        if K > 64:
            b_h2 *= tl.exp2(tl.load(p_gl + o_k2, mask=m_k2, other=0.0).to(tl.float32))[None, :]
            b_h2 = tl.dot(b_vt, _tile(kg, o_t, m_t, o_k2, m_k2, HK * K), b_h2)

    if IS_VARLEN:
        # the last sequence's programs zero the rows after it, if the batch runs past it
        # (fla's wrapper zeroes all of o first; here only what no sequence writes)
        if i_n == tl.num_programs(0) // (NV * HV) - 1:
            for i_p in range(tl.cdiv(T_all - bos - T, BT)):
                o_p = (T + i_p * BT + o_i).to(tl.int64)
                tl.store(
                    o + o_p[:, None] * (HV * V) + o_v[None, :],
                    tl.zeros([BT, BV], dtype=o.dtype.element_ty),
                    mask=(o_p < T_all - bos)[:, None] & m_v[None, :],
                )

    if STORE_FINAL_STATE:
        p_ht = ht + i_nh * V * K + o_v[:, None] * K
        tl.store(p_ht + o_k1[None, :], b_h1, mask=m_v[:, None] & m_k1[None, :])
        if K > 64:
            tl.store(p_ht + o_k2[None, :], b_h2, mask=m_v[:, None] & m_k2[None, :])


def _check(qg, kg, w, u, gk, A, h0, cu_seqlens, chunk_size) -> int:
    """N (the number of sequences) after checking the shapes fwd_h_o documents; ValueError
    naming the first tensor that does not fit."""
    if chunk_size != 64:
        raise ValueError(f"the fused forward chunks by 64 tokens, got chunk_size {chunk_size}")
    named = {"qg": qg, "kg": kg, "w": w, "u": u, "gk": gk, "A": A}
    for name, t in named.items():
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D, got {tuple(t.shape)}")
    B, T, HV, K = qg.shape
    HK, V = kg.shape[2], u.shape[3]
    if K > MAX_K:
        where = (
            "kda/008's fwd.fwd_h_o takes K up to 256 (fla's two kernels), from q and the gate"
            if K <= 256
            else "no stage here or in fla runs K above 256"
        )
        raise ValueError(f"the walk holds K <= {MAX_K} key columns, got K {K}: {where}")
    if not (qg.dtype == kg.dtype == w.dtype):
        raise ValueError(
            f"qg, kg and w must share one dtype (their products' operands), got {qg.dtype}, "
            f"{kg.dtype} and {w.dtype}: round qg = q * 2^g to kg's dtype, as fla's w/u stage does"
        )
    if HK < 1 or HV % HK:
        raise ValueError(f"value heads HV {HV} (qg's) must be a multiple of kg's heads {HK}")
    want = {
        "u": (u, (B, T, HV, V)), "kg": (kg, (B, T, HK, K)), "w": (w, (B, T, HV, K)),
        "gk": (gk, (B, T, HV, K)), "A": (A, (B, T, HV, chunk_size)),
    }  # fmt: skip
    for name, (t, shape) in want.items():
        if tuple(t.shape) != shape:
            raise ValueError(f"{name} must be {list(shape)}, got {list(t.shape)}")
    for name, t in (("qg", qg), *((n, t) for n, (t, _) in want.items())):
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous (fla's stages make it so)")
    if cu_seqlens is not None:
        if B != 1:
            raise ValueError(f"a packed batch has B == 1, got B {B}")
        if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:
            raise ValueError(f"cu_seqlens must be [N + 1], got {list(cu_seqlens.shape)}")
    N = B if cu_seqlens is None else cu_seqlens.numel() - 1
    if h0 is not None and tuple(h0.shape) != (N, HV, V, K):
        raise ValueError(f"initial_state must be {[N, HV, V, K]}, got {list(h0.shape)}")
    if BV < 16 or BV & (BV - 1):
        raise ValueError(f"KDA_FWDHO19_BV {BV} must be a power of two of at least 16 (tl.dot)")
    return N


def fwd_h_o(qg, kg, w, u, gk, A, scale, initial_state=None, output_final_state=False,
            cu_seqlens=None, chunk_size=64):  # fmt: skip
    """(o, final_state) of the forward's state pass and output, with the state V-first.

    qg: [B, T, HV, K], q * 2^g in the inputs' dtype (fla's ``recompute_w_u_fwd`` given q);
    kg: [B, T, HK, K] and w: [B, T, HV, K] (the same stage's); u: [B, T, HV, V]; gk:
    [B, T, HV, K] fp32, the per-key gate cumsum in log2 units (only each chunk's last row is
    read); A: the intra-chunk scores Aqk [B, T, HV, chunk_size]; HV a multiple of HK;
    initial_state: [N, HV, V, K] fp32 or None (any strides); cu_seqlens: [N + 1] int or None
    (then N = B; packed: B == 1, its values taken as given, so cu_seqlens[0] must be 0: rows
    before it are not written). K at most MAX_K (128). Returns o
    [B, T, HV, V] in u's dtype (rows past the last packed sequence 0, as fla's) and
    final_state [N, HV, V, K] fp32 (None unless output_final_state).

    Raises ValueError for K above MAX_K (kda/008's ``fwd_h_o`` takes K up to 256, from q and
    the gate), a tensor of another shape than these, qg, kg and w of different dtypes, one of
    qg, kg, w, u, gk, A that is not contiguous, a packed batch with B != 1, a chunk size other than 64, or a KDA_FWDHO19_BV
    below 16 or not a power of two.
    """
    h0 = initial_state.contiguous() if initial_state is not None else None
    N = _check(qg, kg, w, u, gk, A, h0, cu_seqlens, chunk_size)
    B, T, HV, K = qg.shape
    HK, V = kg.shape[2], u.shape[3]
    o = torch.empty_like(u)  # every row written (rows past a packed batch's sequences: 0)
    ht = u.new_empty(N, HV, V, K, dtype=torch.float32) if output_final_state else None
    chunk_kda_fwd_kernel_h_o[(triton.cdiv(V, BV) * N * HV,)](
        qg, kg, w, u, gk, A, o, h0 if h0 is not None else o, ht if ht is not None else o,
        cu_seqlens if cu_seqlens is not None else o, scale, T, HK=HK, HV=HV, K=K, V=V,
        BT=chunk_size, BV=BV, USE_INITIAL_STATE=h0 is not None,
        STORE_FINAL_STATE=ht is not None, IS_VARLEN=cu_seqlens is not None,
        num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )  # fmt: skip
    return o, ht
