"""The forward's state pass and output of chunk KDA in one kernel.

fla 0.6.0 runs them as two launches. ``chunk_gated_delta_rule_fwd_kernel_h_blockdim64``
walks each sequence's chunks for one (sequence, value head, BV-wide block of V), holding the
state S [BV, K] in fp32 registers, and writes, per chunk, the state before it (h, bf16
[B, NT, HV, V, K]) and the new values v_new = u - w S^T (bf16 [B, T, HV, V]). Then
``chunk_gla_fwd_kernel_o`` reads q, the gate cumsum, h, v_new and the intra-chunk scores Aqk
back and writes o = scale (q * 2^g) S^T + tril(Aqk) v_new.

Here the walk computes o itself, from the state it already holds, so h and v_new never
reach memory (the backward recomputes both, as fla's chain with recompute does). Per chunk
of BT = 64 rows, in the order of fla's two kernels and with their roundings (S and v_new
enter the products in the inputs' dtype, as their stored copies do in fla):

    v_new = u - w S^T                                  [BT, BV]
    o     = scale (q * 2^g) S^T + tril(Aqk) v_new      [BT, BV], stored
    S     = S * 2^g_last[None, :] + v_new^T kg         [BV, K]

g is the per-key gate cumsum in log2 units, so every exponent here is at most 0 (the gate
is non-positive), with no factorised exp(g_i - g_j): the non-safe gate's range cannot
overflow this stage (kg = k * 2^(g_last - g) comes from fla's w/u stage, bounded by 1 the
same way).

fla's output wrapper also zeroes all of o before its kernel writes it (1.07 GB at prod),
for the rows a packed batch may have past its last sequence. Here the programs of the last
sequence zero those rows, if there are any, and nothing else is filled.

The state is two 64-wide K blocks, so K <= 128 runs here; K above that goes to fla's two
kernels (``fwd_h_o`` says so in its docstring).

Env knobs: KDA_FWDHO_BV (a power of two, at least 16), KDA_FWDHO_WARPS, KDA_FWDHO_STAGES.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

BV = int(os.environ.get("KDA_FWDHO_BV", "64"))
NUM_WARPS = int(os.environ.get("KDA_FWDHO_WARPS", "4"))
NUM_STAGES = int(os.environ.get("KDA_FWDHO_STAGES", "2"))
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
    q, kg, w, u, gk, A, o, h0, ht, cu_seqlens, scale, T,
    H: tl.constexpr, HK: tl.constexpr, HV: tl.constexpr, K: tl.constexpr,
    V: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr,
    USE_INITIAL_STATE: tl.constexpr, STORE_FINAL_STATE: tl.constexpr,
    IS_VARLEN: tl.constexpr,
):  # fmt: skip
    """One program: sequence i_n, value head i_hv, V block i_v, every chunk of the sequence in
    order (module docstring). q [B, T, H, K]; kg [B, T, HK, K]; w, gk [B, T, HV, K]; u, o
    [B, T, HV, V]; A [B, T, HV, BT]; h0, ht [N, HV, V, K] fp32."""
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

    q += (bos * H + i_hv // (HV // H)) * K
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
        # o = scale (q * 2^g) S^T + tril(A) v_new
        b_q = _tile(q, o_t, m_t, o_k1, m_k1, H * K)
        b_g = _tile(gk, o_t, m_t, o_k1, m_k1, HV * K).to(tl.float32)
        b_o = tl.dot((b_q * tl.exp2(b_g)).to(b_q.dtype), b_s1)
        if K > 64:
            b_q = _tile(q, o_t, m_t, o_k2, m_k2, H * K)
            b_g = _tile(gk, o_t, m_t, o_k2, m_k2, HV * K).to(tl.float32)
            b_o = tl.dot((b_q * tl.exp2(b_g)).to(b_q.dtype), b_s2, b_o)
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


def _check(q, kg, w, u, gk, A, h0, cu_seqlens, chunk_size) -> int:
    """N (the number of sequences) after checking the shapes fwd_h_o documents; ValueError
    naming the first tensor that does not fit."""
    if chunk_size != 64:
        raise ValueError(f"the fused forward chunks by 64 tokens, got chunk_size {chunk_size}")
    if q.dim() != 4 or u.dim() != 4:
        raise ValueError(f"q and u must be 4-D, got {tuple(q.shape)} and {tuple(u.shape)}")
    B, T, H, K = q.shape
    HK, HV, V = kg.shape[2], u.shape[2], u.shape[3]
    if HV % H or HV % HK:
        raise ValueError(f"value heads HV {HV} must be a multiple of q's H {H} and kg's {HK}")
    want = {
        "u": (u, (B, T, HV, V)), "kg": (kg, (B, T, HK, K)), "w": (w, (B, T, HV, K)),
        "gk": (gk, (B, T, HV, K)), "A": (A, (B, T, HV, chunk_size)),
    }  # fmt: skip
    for name, (t, shape) in want.items():
        if tuple(t.shape) != shape:
            raise ValueError(f"{name} must be {list(shape)}, got {list(t.shape)}")
    for name, t in (("q", q), *((n, t) for n, (t, _) in want.items())):
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
        raise ValueError(f"KDA_FWDHO_BV {BV} must be a power of two of at least 16 (tl.dot)")
    return N


def fwd_h_o(q, kg, w, u, gk, A, scale, initial_state=None, output_final_state=False,
            cu_seqlens=None, chunk_size=64):  # fmt: skip
    """(o, final_state) of the forward's state pass and output, with the state V-first.

    q: [B, T, H, K] (l2-normed); kg: [B, T, HK, K] and w: [B, T, HV, K] (fla's w/u stage);
    u: [B, T, HV, V]; gk: [B, T, HV, K] fp32, the per-key gate cumsum in log2 units; A: the
    intra-chunk scores Aqk [B, T, HV, chunk_size]; HV a multiple of H and HK;
    initial_state: [N, HV, V, K] fp32 or None (any strides); cu_seqlens: [N + 1] int or None
    (then N = B; packed: B == 1, its values taken as given). Returns o [B, T, HV, V] in u's
    dtype (rows past the last packed sequence 0, as fla's) and final_state [N, HV, V, K] fp32
    (None unless output_final_state).

    K above MAX_K runs fla's two kernels (``chunk_gated_delta_rule_fwd_h`` then
    ``chunk_gla_fwd_o_gk``), which hold up to 4 blocks of 64. Raises ValueError for a tensor
    of another shape than these, one of q, kg, w, u, gk, A that is not contiguous, a packed
    batch with B != 1, a chunk size other than 64, or a KDA_FWDHO_BV below 16 or not a power
    of two.
    """
    h0 = initial_state.contiguous() if initial_state is not None else None
    N = _check(q, kg, w, u, gk, A, h0, cu_seqlens, chunk_size)
    B, T, H, K = q.shape
    HK, HV, V = kg.shape[2], u.shape[2], u.shape[3]
    if K > MAX_K:
        from fla.ops.common.chunk_delta_h import chunk_gated_delta_rule_fwd_h
        from fla.ops.gla.chunk import chunk_gla_fwd_o_gk

        h, v_new, ht = chunk_gated_delta_rule_fwd_h(
            k=kg, w=w, u=u, gk=gk, initial_state=h0, output_final_state=output_final_state,
            cu_seqlens=cu_seqlens, chunk_size=chunk_size, state_v_first=True,
        )  # fmt: skip
        o = chunk_gla_fwd_o_gk(
            q=q, v=v_new, g=gk, A=A, h=h, scale=scale, cu_seqlens=cu_seqlens,
            chunk_size=chunk_size, state_v_first=True,
        )  # fmt: skip
        return o, ht
    o = torch.empty_like(u)  # every row written (rows past a packed batch's sequences: 0)
    ht = u.new_empty(N, HV, V, K, dtype=torch.float32) if output_final_state else None
    chunk_kda_fwd_kernel_h_o[(triton.cdiv(V, BV) * N * HV,)](
        q, kg, w, u, gk, A, o, h0 if h0 is not None else o, ht if ht is not None else o,
        cu_seqlens if cu_seqlens is not None else o, scale, T, H=H, HK=HK, HV=HV, K=K, V=V,
        BT=chunk_size, BV=BV, USE_INITIAL_STATE=h0 is not None,
        STORE_FINAL_STATE=ht is not None, IS_VARLEN=cu_seqlens is not None,
        num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )  # fmt: skip
    return o, ht
