"""The forward's state walk and output of chunk KDA, forming the WY products w and u itself
instead of reading them from fla's w/u kernel.

kda/019's walk (``../019-fwd-state-qg/fwd.py``) takes one (sequence, value head, BV-wide block
of V) per program and, per chunk of BT = 64 rows, with the state S [BV, K] in fp32 registers:

    v_new = u - w S^T                                  [BT, BV]
    o     = scale qg S^T + tril(Aqk) v_new             [BT, BV], stored
    S     = S * 2^g_last[None, :] + v_new^T kg         [BV, K]

reading w, u and kg from fla's w/u kernel, which reads k, v, beta, the gate tile and the
solved A of each chunk and writes w, u and kg (1.80 ms of kda/024's 8.97 ms forward at prod on
an H100). Here the walk forms, per chunk,

    u = A (v beta)         for its own V block, v beta rounded to v's dtype
    w = A kb               kb = k beta 2^g from the diagonal kernel (``intra_fwd.py``)

each rounded to its dtype as fla's kernel stores it, then goes on as kda/019's walk. So it
reads v, A [BT, BT], kb and beta instead of u and w (per chunk and V block of 128 at K 128:
16 + 8 + 16 KiB and 256 bytes of beta in place of 16 + 16 KiB), and fla's w/u kernel, its
reads of k, v and the gate and its writes of w, u and kg, are gone; the diagonal kernel
writes kb and kg (two bf16 stores per key element). Two more [BT, BT] x [BT, .] products
per chunk and V block (u, and w once per V block: at BV 128, two programs form each chunk's
w) sit on the walk's path, off the state's dependence chain.

Arithmetic: fla's w/u kernel's products on the same operands (A, v beta and kb in the
inputs' dtype, fp32 accumulation, rounded to the inputs' dtype), then kda/019's walk on them.
Every exponent is at most 0 (no factorised exp(g_i - g_j)), so no gate depth can overflow
this stage.

Env knobs: KDA_FWDHO27_BV (a power of two, at least 16, default 128), KDA_FWDHO27_WARPS
(default 8), KDA_FWDHO27_STAGES (default 2): kda/019's launch in kda/025's record.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

BV = int(os.environ.get("KDA_FWDHO27_BV", "128"))
NUM_WARPS = int(os.environ.get("KDA_FWDHO27_WARPS", "8"))
NUM_STAGES = int(os.environ.get("KDA_FWDHO27_STAGES", "2"))
MAX_K = 128  # the state is held as two 64-wide blocks of K

__all__ = ["MAX_K", "chunk_kda_fwd_kernel_walk_wu", "fwd_walk"]


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
def chunk_kda_fwd_kernel_walk_wu(
    qg, kb, kg, v, beta, Akk, gk, Aqk, o, h0, ht, cu_seqlens, scale, T,
    HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr,
    USE_INITIAL_STATE: tl.constexpr, STORE_FINAL_STATE: tl.constexpr,
    IS_VARLEN: tl.constexpr,
):  # fmt: skip
    """One program: sequence i_n, value head i_hv, V block i_v, every chunk of the sequence in
    order (module docstring). qg, kb, kg, gk [B, T, HV, K]; v, o [B, T, HV, V]; beta
    [B, T, HV]; Akk, Aqk [B, T, HV, BT]; h0, ht [N, HV, V, K] fp32."""
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

    SK: tl.constexpr = HV * K
    SV: tl.constexpr = HV * V
    SA: tl.constexpr = HV * BT
    qg += (bos * HV + i_hv) * K
    kb += (bos * HV + i_hv) * K
    kg += (bos * HV + i_hv) * K
    gk += (bos * HV + i_hv) * K
    v += (bos * HV + i_hv) * V
    o += (bos * HV + i_hv) * V
    beta += bos * HV + i_hv
    Akk += (bos * HV + i_hv) * BT
    Aqk += (bos * HV + i_hv) * BT

    o_v = i_v * BV + tl.arange(0, BV)
    m_v = o_v < V
    o_k1 = tl.arange(0, 64)
    m_k1 = o_k1 < K
    o_k2 = 64 + o_k1
    m_k2 = o_k2 < K
    o_i = tl.arange(0, BT)
    m_i = o_i < BT
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
        b_s1 = tl.trans(b_h1).to(kb.dtype.element_ty)
        if K > 64:
            b_s2 = tl.trans(b_h2).to(kb.dtype.element_ty)
        # fla's w/u products: u = A (v beta) for this V block, w = A kb
        b_A = _tile(Akk, o_t, m_t, o_i, m_i, SA)
        b_b = tl.load(beta + o_t * HV, mask=m_t, other=0.0)
        b_vv = _tile(v, o_t, m_t, o_v, m_v, SV)
        b_w = tl.dot(b_A, _tile(kb, o_t, m_t, o_k1, m_k1, SK)).to(kb.dtype.element_ty)
        # v_new = u - w S^T
        b_vn = tl.dot(b_w, b_s1)
        if K > 64:
            b_w = tl.dot(b_A, _tile(kb, o_t, m_t, o_k2, m_k2, SK)).to(kb.dtype.element_ty)
            b_vn = tl.dot(b_w, b_s2, b_vn)
        b_u = tl.dot(b_A, (b_vv * b_b[:, None]).to(b_vv.dtype)).to(v.dtype.element_ty)
        b_vn = b_u.to(tl.float32) - b_vn
        b_vn = b_vn.to(kg.dtype.element_ty)
        # o = scale qg S^T + tril(Aqk) v_new
        b_o = tl.dot(_tile(qg, o_t, m_t, o_k1, m_k1, SK), b_s1)
        if K > 64:
            b_o = tl.dot(_tile(qg, o_t, m_t, o_k2, m_k2, SK), b_s2, b_o)
        b_o *= scale
        b_Aq = _tile(Aqk, o_t, m_t, o_i, m_i, SA)
        b_Aq = tl.where(m_s, b_Aq, 0.0).to(b_vn.dtype)
        b_o = tl.dot(b_Aq, b_vn, b_o)
        tl.store(
            o + o_t[:, None] * SV + o_v[None, :],
            b_o.to(o.dtype.element_ty),
            mask=m_t[:, None] & m_v[None, :],
        )
        # S = S * 2^g_last + v_new^T kg, g_last the gate cumsum at the chunk's last row
        p_gl = gk + tl.max(tl.where(m_t, o_t, 0), axis=0) * SK
        b_vt = tl.trans(b_vn)
        b_h1 *= tl.exp2(tl.load(p_gl + o_k1, mask=m_k1, other=0.0).to(tl.float32))[None, :]
        b_h1 = tl.dot(b_vt, _tile(kg, o_t, m_t, o_k1, m_k1, SK), b_h1)
        if K > 64:
            b_h2 *= tl.exp2(tl.load(p_gl + o_k2, mask=m_k2, other=0.0).to(tl.float32))[None, :]
            b_h2 = tl.dot(b_vt, _tile(kg, o_t, m_t, o_k2, m_k2, SK), b_h2)

    if IS_VARLEN:
        # the last sequence's programs zero the rows after it, if the batch runs past it
        if i_n == tl.num_programs(0) // (NV * HV) - 1:
            for i_p in range(tl.cdiv(T_all - bos - T, BT)):
                o_p = (T + i_p * BT + o_i).to(tl.int64)
                tl.store(
                    o + o_p[:, None] * SV + o_v[None, :],
                    tl.zeros([BT, BV], dtype=o.dtype.element_ty),
                    mask=(o_p < T_all - bos)[:, None] & m_v[None, :],
                )

    if STORE_FINAL_STATE:
        p_ht = ht + i_nh * V * K + o_v[:, None] * K
        tl.store(p_ht + o_k1[None, :], b_h1, mask=m_v[:, None] & m_k1[None, :])
        if K > 64:
            tl.store(p_ht + o_k2[None, :], b_h2, mask=m_v[:, None] & m_k2[None, :])


def _check(qg, kb, kg, v, beta, Akk, gk, Aqk, h0, cu_seqlens) -> int:
    """N (the number of sequences) after checking the shapes fwd_walk documents; ValueError
    naming the first tensor that does not fit."""
    for name, t in (("qg", qg), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D, got {tuple(t.shape)}")
    B, T, HV, K = qg.shape
    V = v.shape[3]
    if K > MAX_K:
        raise ValueError(
            f"the walk holds K <= {MAX_K} key columns, got K {K}: kda/008's fwd.fwd_h_o "
            "(from q, the gate and fla's w/u stage) takes K up to 256"
        )
    if not (qg.dtype == kb.dtype == kg.dtype):
        raise ValueError(
            f"qg, kb and kg must share one dtype (their products' operands), got {qg.dtype}, "
            f"{kb.dtype} and {kg.dtype}"
        )
    want = {
        "kb": (kb, (B, T, HV, K)), "kg": (kg, (B, T, HV, K)), "v": (v, (B, T, HV, V)),
        "beta": (beta, (B, T, HV)), "Akk": (Akk, (B, T, HV, 64)), "gk": (gk, (B, T, HV, K)),
        "Aqk": (Aqk, (B, T, HV, 64)),
    }  # fmt: skip
    for name, (t, shape) in want.items():
        if tuple(t.shape) != shape:
            raise ValueError(f"{name} must be {list(shape)}, got {list(t.shape)}")
    for name, t in (("qg", qg), *((n, t) for n, (t, _) in want.items())):
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous (the chain makes it so)")
    if cu_seqlens is not None:
        if B != 1:
            raise ValueError(f"a packed batch has B == 1, got B {B}")
        if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:
            raise ValueError(f"cu_seqlens must be [N + 1], got {list(cu_seqlens.shape)}")
    N = B if cu_seqlens is None else cu_seqlens.numel() - 1
    if h0 is not None and tuple(h0.shape) != (N, HV, V, K):
        raise ValueError(f"initial_state must be {[N, HV, V, K]}, got {list(h0.shape)}")
    if BV < 16 or BV & (BV - 1):
        raise ValueError(f"KDA_FWDHO27_BV {BV} must be a power of two of at least 16 (tl.dot)")
    return N


def fwd_walk(qg, kb, kg, v, beta, Akk, gk, Aqk, scale, initial_state=None,
             output_final_state=False, cu_seqlens=None):  # fmt: skip
    """(o, final_state) of the forward's state walk and output, with the state V-first.

    qg = q 2^g, kb = k beta 2^g, kg = k 2^(g_last - g): [B, T, HV, K] in the inputs' dtype
    (``intra_fwd.fwd_intra``); v: [B, T, HV, V]; beta: [B, T, HV] (fp32 after the chain's
    sigmoid); Akk: the solved WY matrix and Aqk the intra-chunk scores, [B, T, HV, 64]; gk:
    [B, T, HV, K] fp32 gate cumsum in log2 units (each chunk's last row is read);
    initial_state: [N, HV, V, K] fp32 or None (any strides); cu_seqlens: [N + 1] int or None
    (then N = B; packed: B == 1 and cu_seqlens[0] == 0). K at most MAX_K (128). Chunks of 64
    rows. Returns o [B, T, HV, V] in v's dtype (rows past the last packed sequence 0) and
    final_state [N, HV, V, K] fp32 (None unless output_final_state).

    Raises ValueError for K above MAX_K, a tensor of another shape than these, qg, kb and kg
    of different dtypes, a non-contiguous one, a packed batch with B != 1, or a
    KDA_FWDHO27_BV below 16 or not a power of two.
    """
    h0 = initial_state.contiguous() if initial_state is not None else None
    N = _check(qg, kb, kg, v, beta, Akk, gk, Aqk, h0, cu_seqlens)
    B, T, HV, K = qg.shape
    V = v.shape[3]
    o = torch.empty_like(v)  # every row written (rows past a packed batch's sequences: 0)
    ht = v.new_empty(N, HV, V, K, dtype=torch.float32) if output_final_state else None
    chunk_kda_fwd_kernel_walk_wu[(triton.cdiv(V, BV) * N * HV,)](
        qg, kb, kg, v, beta, Akk, gk, Aqk, o, h0 if h0 is not None else o,
        ht if ht is not None else o, cu_seqlens if cu_seqlens is not None else o, scale, T,
        HV=HV, K=K, V=V, BT=64, BV=BV, USE_INITIAL_STATE=h0 is not None,
        STORE_FINAL_STATE=ht is not None, IS_VARLEN=cu_seqlens is not None,
        num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )  # fmt: skip
    return o, ht
