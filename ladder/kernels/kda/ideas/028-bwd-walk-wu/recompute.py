"""The backward's recompute of the chunk states for chunk KDA, with fla's w/u kernel folded
into the state walk, as kda/027 folds it into the forward's.

kda/025's backward starts by recomputing what its forward freed, with two of fla's kernels at
fixed launches (kda/024's ``launch.py``):

- ``recompute_w_u_fwd_kda_kernel`` with q: reads q, k, v, beta, the gate tile and the solved
  A, writes w, u, qg and kg (2.25 ms of the 26.98 ms backward at prod on an H100,
  ``docs/results/profile-kda-024-h100-20261206.txt``);
- ``chunk_gated_delta_rule_fwd_kernel_h_blockdim64``: walks the chunks with the state S
  [BV, K] in fp32, reading w, u and kg and writing the chunk states h (bf16, V-first) and
  v_new = u - w S^T (2.16 ms).

Here a row-wise kernel (``kda_bwd_qkg_kernel``) writes qg = q 2^g, kb = k beta 2^g and
kg = k 2^(g_last - g) (q, k, beta and the gate tile read once; no A, no v, no products), and
the walk (``kda_bwd_walk_kernel``) forms per chunk and V block w = A kb and u = A (v beta)
itself, as kda/027's forward walk does, stores w once per chunk (the state-gradient stage
reads it) and then runs fla's recurrence as fla's kernel runs it: h stored before the chunk,
v_new = u - w S^T stored, S scaled by 2^g_last, then S += (kg^T v_new)^T with the product
added after it is formed (fla's order, not accumulated into S). u is never written: its
round trip through memory, and the second read of k, v and the gate tile, are gone.

Every operand and product is fla's (the same roundings to the inputs' dtype, fp32
accumulation), so h, v_new, w, qg and kg are fla's to the bit on the GPU
(tests/test_kda_028_gpu.py). Every exponent is at most 0: no gate depth overflows here.

Shapes: q, k [B, T, H, K]; v [B, T, HV, V]; g [B, T, HV, K] fp32 gate cumsum (log2 units);
beta [B, T, HV] fp32; A (fla's Akk) [B, T, HV, 64]; h0 [N, HV, V, K] fp32 or None. A packed
batch has B == 1 with cu_seqlens [N + 1] and fla's chunk_indices for chunk 64.

Env knobs: KDA_BWDWALK28_BV (a power of two, at least 16, default 64), KDA_BWDWALK28_WARPS
(default 4), KDA_BWDWALK28_STAGES (default 2): fla's fwd_h prod pick (kda/024's KDA_FH_*);
KDA_QKG28_WARPS (default 4) for the row-wise kernel.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

BV = int(os.environ.get("KDA_BWDWALK28_BV", "64"))
NUM_WARPS = int(os.environ.get("KDA_BWDWALK28_WARPS", "4"))
NUM_STAGES = int(os.environ.get("KDA_BWDWALK28_STAGES", "2"))
QKG_WARPS = int(os.environ.get("KDA_QKG28_WARPS", "4"))
MAX_K = 128  # the state is held as two 64-wide blocks of K
BT = 64

__all__ = ["MAX_K", "kda_bwd_qkg_kernel", "kda_bwd_walk_kernel", "recompute"]


@triton.jit(do_not_specialize=["T"])
def kda_bwd_qkg_kernel(
    q, k, g, beta, qg, kb, kg, cu_seqlens, chunk_indices, T,
    H: tl.constexpr, HV: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
    IS_VARLEN: tl.constexpr,
):  # fmt: skip
    """One program: chunk i_t (of batch row i_b, or of chunk_indices' list), value head i_hv.
    Writes the chunk's rows of qg, kb and kg [B, T, HV, K] (module docstring), formed as fla's
    w/u kernel forms qg and kg and its w product's right operand."""
    i_t, i_bh = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
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
    q += (bos * H + i_h) * K
    k += (bos * H + i_h) * K
    g += (bos * HV + i_hv) * K
    beta += bos * HV + i_hv
    qg += (bos * HV + i_hv) * K
    kb += (bos * HV + i_hv) * K
    kg += (bos * HV + i_hv) * K

    o_t = i_t * BT + tl.arange(0, BT)
    m_t = o_t < L
    last = tl.minimum(i_t * BT + BT, L) - 1
    b_b = tl.load(beta + o_t * HV, mask=m_t, other=0.0)
    for i_k in range(tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        m_tk = m_t[:, None] & m_k[None, :]
        p_qk = o_t[:, None] * (H * K) + o_k[None, :]
        p_g = o_t[:, None] * (HV * K) + o_k[None, :]
        b_k = tl.load(k + p_qk, mask=m_tk, other=0.0)
        b_g = tl.load(g + p_g, mask=m_tk, other=0.0).to(tl.float32)
        b_eg = tl.exp2(b_g)
        b_q = tl.load(q + p_qk, mask=m_tk, other=0.0)
        tl.store(qg + p_g, (b_q * b_eg).to(qg.dtype.element_ty), mask=m_tk)
        b_kb = b_k * b_b[:, None]
        b_kb *= b_eg
        tl.store(kb + p_g, b_kb.to(kb.dtype.element_ty), mask=m_tk)
        b_gn = tl.load(g + last * (HV * K) + o_k, mask=m_k, other=0.0).to(tl.float32)
        b_kgn = b_k * tl.where(m_t[:, None], tl.exp2(b_gn[None, :] - b_g), 0.0)
        tl.store(kg + p_g, b_kgn.to(kg.dtype.element_ty), mask=m_tk)


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
def kda_bwd_walk_kernel(
    kb, kg, v, beta, A, gk, w, v_new, h, h0, cu_seqlens, chunk_offsets, T,
    HV: tl.constexpr, K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr,
    USE_INITIAL_STATE: tl.constexpr, IS_VARLEN: tl.constexpr,
):  # fmt: skip
    """One program: sequence i_n, value head i_hv, V block i_v, every chunk of the sequence in
    order. kb, kg, gk, w [B, T, HV, K]; v, v_new [B, T, HV, V]; beta [B, T, HV]; A
    [B, T, HV, BT]; h [B, NT, HV, V, K] (packed: [1, NT over all sequences, ...]); h0
    [N, HV, V, K] fp32."""
    pid = tl.program_id(0).to(tl.int64)
    NV = tl.cdiv(V, BV)
    i_v, i_nh = pid % NV, pid // NV
    i_n, i_hv = i_nh // HV, i_nh % HV
    if IS_VARLEN:
        bos = tl.load(cu_seqlens + i_n).to(tl.int64)
        eos = tl.load(cu_seqlens + i_n + 1).to(tl.int64)
        T = eos - bos
        NT = tl.cdiv(T, BT)
        boh = tl.load(chunk_offsets + i_n).to(tl.int64)
    else:
        bos = i_n * T
        NT = tl.cdiv(T, BT)
        boh = i_n * NT

    SK: tl.constexpr = HV * K
    SV: tl.constexpr = HV * V
    SA: tl.constexpr = HV * BT
    kb += (bos * HV + i_hv) * K
    kg += (bos * HV + i_hv) * K
    gk += (bos * HV + i_hv) * K
    w += (bos * HV + i_hv) * K
    v += (bos * HV + i_hv) * V
    v_new += (bos * HV + i_hv) * V
    beta += bos * HV + i_hv
    A += (bos * HV + i_hv) * BT
    h += (boh * HV + i_hv) * K * V

    o_v = i_v * BV + tl.arange(0, BV)
    m_v = o_v < V
    o_k1 = tl.arange(0, 64)
    m_k1 = o_k1 < K
    o_k2 = 64 + o_k1
    m_k2 = o_k2 < K
    o_i = tl.arange(0, BT)

    b_h1 = tl.zeros([BV, 64], dtype=tl.float32)
    b_h2 = tl.zeros([BV, 64], dtype=tl.float32)
    if USE_INITIAL_STATE:
        b_h1 += _tile(h0 + i_nh * V * K, o_v, m_v, o_k1, m_k1, K).to(tl.float32)
        if K > 64:
            b_h2 += _tile(h0 + i_nh * V * K, o_v, m_v, o_k2, m_k2, K).to(tl.float32)

    for i_t in range(NT):
        o_t = (i_t * BT + o_i).to(tl.int64)
        m_t = o_t < T
        # the state before this chunk, stored as fla's kernel stores it (V-first)
        p_h = h + o_v[:, None] * K  # h: this chunk's state (advanced below, 64-bit)
        tl.store(
            p_h + o_k1[None, :], b_h1.to(h.dtype.element_ty), mask=m_v[:, None] & m_k1[None, :]
        )
        if K > 64:
            tl.store(p_h + o_k2[None, :], b_h2.to(h.dtype.element_ty),
                     mask=m_v[:, None] & m_k2[None, :])  # fmt: skip
        # fla's w/u products: w = A kb (stored once per chunk), u = A (v beta) for this block
        b_A = _tile(A, o_t, m_t, o_i, o_i < BT, SA)
        b_w = tl.dot(b_A, _tile(kb, o_t, m_t, o_k1, m_k1, SK)).to(w.dtype.element_ty)
        if i_v == 0:
            tl.store(w + o_t[:, None] * SK + o_k1[None, :], b_w, mask=m_t[:, None] & m_k1[None, :])
        # v_new = u - w S^T
        b_v = tl.dot(b_w, tl.trans(b_h1).to(b_w.dtype))
        if K > 64:
            b_w = tl.dot(b_A, _tile(kb, o_t, m_t, o_k2, m_k2, SK)).to(w.dtype.element_ty)
            if i_v == 0:
                tl.store(w + o_t[:, None] * SK + o_k2[None, :], b_w,
                         mask=m_t[:, None] & m_k2[None, :])  # fmt: skip
            b_v = tl.dot(b_w, tl.trans(b_h2).to(b_w.dtype), b_v)
        b_b = tl.load(beta + o_t * HV, mask=m_t, other=0.0)
        b_vv = _tile(v, o_t, m_t, o_v, m_v, SV)
        b_u = tl.dot(b_A, (b_vv * b_b[:, None]).to(b_vv.dtype)).to(v.dtype.element_ty)
        b_v = b_u.to(tl.float32) - b_v
        tl.store(v_new + o_t[:, None] * SV + o_v[None, :], b_v.to(v_new.dtype.element_ty),
                 mask=m_t[:, None] & m_v[None, :])  # fmt: skip
        # S = S 2^g_last, then S += (kg^T v_new)^T, the product formed on its own (fla's order)
        p_gl = gk + tl.max(tl.where(m_t, o_t, 0), axis=0) * SK
        b_h1 *= tl.exp2(tl.load(p_gl + o_k1, mask=m_k1, other=0.0).to(tl.float32))[None, :]
        if K > 64:
            b_h2 *= tl.exp2(tl.load(p_gl + o_k2, mask=m_k2, other=0.0).to(tl.float32))[None, :]
        b_v = b_v.to(kg.dtype.element_ty)
        b_k = tl.load(kg + o_k1[:, None] + o_t[None, :] * SK, mask=m_k1[:, None] & m_t[None, :],
                      other=0.0)  # fmt: skip
        b_h1 += tl.trans(tl.dot(b_k, b_v))
        if K > 64:
            b_k = tl.load(kg + o_k2[:, None] + o_t[None, :] * SK,
                          mask=m_k2[:, None] & m_t[None, :], other=0.0)  # fmt: skip
            b_h2 += tl.trans(tl.dot(b_k, b_v))
        h += HV * K * V  # the next chunk's state (pointer arithmetic: no 32-bit product)


def _check(q, k, v, g, beta, A, h0, cu_seqlens, chunk_indices) -> int:
    """N (the number of sequences) after checking the shapes ``recompute`` documents;
    ValueError naming the first tensor that does not fit."""
    if k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"k and v must be 4-D, got {tuple(k.shape)} and {tuple(v.shape)}")
    B, T, H, K = k.shape
    HV, V = v.shape[2], v.shape[3]
    if K > MAX_K:
        raise ValueError(f"the walk holds K <= {MAX_K} key columns, got K {K}")
    if H < 1 or HV % H:
        raise ValueError(f"the value heads HV {HV} must be a multiple of the heads H {H}")
    want = {
        "q": (q, (B, T, H, K)), "v": (v, (B, T, HV, V)), "g": (g, (B, T, HV, K)),
        "beta": (beta, (B, T, HV)), "A": (A, (B, T, HV, BT)),
    }  # fmt: skip
    for name, (t, shape) in want.items():
        if tuple(t.shape) != shape:
            raise ValueError(f"{name} must be {list(shape)}, got {list(t.shape)}")
    for name, t in (("k", k), *((n, t) for n, (t, _) in want.items())):
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous (the chain makes it so)")
    if g.dtype != torch.float32:
        raise ValueError(f"g must be the fp32 gate cumsum, got {g.dtype}")
    if cu_seqlens is not None:
        if B != 1:
            raise ValueError(f"a packed batch has B == 1, got B {B}")
        if chunk_indices is None:
            raise ValueError("a packed batch (cu_seqlens) needs fla's chunk_indices")
    N = B if cu_seqlens is None else cu_seqlens.numel() - 1
    if h0 is not None and tuple(h0.shape) != (N, HV, V, K):
        raise ValueError(f"initial_state must be {[N, HV, V, K]}, got {list(h0.shape)}")
    if BV < 16 or BV & (BV - 1):
        raise ValueError(f"KDA_BWDWALK28_BV {BV} must be a power of two of at least 16 (tl.dot)")
    return N


def recompute(q, k, v, g, beta, A, h0=None, cu_seqlens=None, chunk_indices=None):
    """(w, qg, kg, h, v_new) as kda/025's backward gets them from fla's w/u kernel (with q)
    and fla's ``chunk_gated_delta_rule_fwd_h`` (gk, ``state_v_first``, no final state).

    Shapes in the module docstring. Returns w, qg, kg [B, T, HV, K] in k's dtype, h
    [B, NT, HV, V, K] in k's dtype (packed: NT the batch's chunks) and v_new like v. Raises
    ValueError, before any launch, for K above MAX_K, a tensor of another shape, a
    non-contiguous one, a g that is not fp32, HV not a multiple of H, a packed batch with
    B != 1 or without chunk_indices, or a KDA_BWDWALK28_BV below 16 or not a power of two."""
    from fla.ops.utils import prepare_chunk_offsets

    h0 = h0.contiguous() if h0 is not None else None
    N = _check(q, k, v, g, beta, A, h0, cu_seqlens, chunk_indices)
    B, T, H, K = k.shape
    HV, V = v.shape[2], v.shape[3]
    NT = triton.cdiv(T, BT) if cu_seqlens is None else len(chunk_indices)
    qg, kb, kg, w = (k.new_empty(B, T, HV, K) for _ in range(4))
    h = k.new_empty(B, NT, HV, V, K)
    v_new = torch.empty_like(v)
    chunk_offsets = None if cu_seqlens is None else prepare_chunk_offsets(cu_seqlens, BT)
    if NT == 0:
        return w, qg, kg, h, v_new
    kda_bwd_qkg_kernel[(NT, B * HV)](
        q, k, g, beta, qg, kb, kg, cu_seqlens, chunk_indices, T, H=H, HV=HV, K=K, BT=BT,
        BK=64, IS_VARLEN=cu_seqlens is not None, num_warps=QKG_WARPS,
    )  # fmt: skip
    kda_bwd_walk_kernel[(triton.cdiv(V, BV) * N * HV,)](
        kb, kg, v, beta, A, g, w, v_new, h, h0 if h0 is not None else v, cu_seqlens,
        chunk_offsets, T, HV=HV, K=K, V=V, BT=BT, BV=BV, USE_INITIAL_STATE=h0 is not None,
        IS_VARLEN=cu_seqlens is not None, num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )  # fmt: skip
    return w, qg, kg, h, v_new
