"""kda/009's gate tail with one program per chunk and value head, walking K in BK-wide blocks,
and 009's faults of the function called on its own fixed.

The stage (the backward's reverse chunk-local cumsum of dg and the gate's backward, fla
0.6.0's ``chunk_local_cumsum(reverse=True)`` then ``kda_gate_bwd``) and its formulas are
kda/009's (``../009-bwd-gate-tail/gate.py``; per element, x = g_in + dt_bias):

    dyg = reverse cumsum of dg over the chunk's rows
    softplus form:    dx = -e^A sigmoid(x) dyg,   dA += sum dyg (-e^A softplus(x))
    lower-bound form: dx = lb e^A s (1 - s) dyg with s = sigmoid(e^A x),   dA += sum dx x
    ddt_bias += sum dx

009 gives each (chunk, head, K block) its own program, the K block the slowest grid axis:
at prod (B16 T8192 H16 K128) it moves its 2.15 GB at 2.0 TB/s, half of what fla's two
kernels reach (009's NOTES.md). Here one program takes one chunk of one value head and
walks the K blocks in a loop, so the blocks of a row are read back to back (fla's cumsum
kernel keeps them neighbours in its grid too), and dA_log's terms are added elementwise
across the loop and reduced once at the end instead of once per block.

Fixed from 009, each where the function alone parted from fla's two kernels:
- ``cu_seqlens`` and ``chunk_indices`` are read contiguous (a strided view was read at
  plain offsets: wrong numbers, no error);
- softplus keeps a NaN input NaN (``tl.minimum`` with ``propagate_nan``; compiled, the
  default drops it, so dA_log got a finite term where fla's is NaN);
- ``chunk_indices`` of another shape than [NT, 2], ``cu_seqlens`` not 1-D, and a chunk size
  that is not a power of two of at least 16 are refused with a ValueError.

A packed batch's rows past its last sequence (if cu_seqlens[-1] < T) belong to no chunk:
fla's cumsum leaves them uninitialised and its gate backward then reads them; here the list's
last chunk writes them 0 and they add nothing to the sums.

Env knobs: KDA_GATE_TAIL_BK (the K block, a power of two of at least 16), KDA_GATE_TAIL_WARPS
(warps per program).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

BK = int(os.environ.get("KDA_GATE_TAIL_BK", "32"))
NUM_WARPS = int(os.environ.get("KDA_GATE_TAIL_WARPS", "4"))

__all__ = ["gate_tail"]


@triton.jit
def _softplus(x):
    """x for x > 20, else log(1 + e^x) (fla's formula); NaN stays NaN."""
    clamped = tl.minimum(x, 20.0, propagate_nan=tl.PropagateNan.ALL)
    return tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(clamped)))


@triton.jit(do_not_specialize=["T", "T_all", "NT"])
def kda_gate_tail_bwd_kernel(
    dgc, g, A_log, dt_bias, dg, dA, dbias, cu_seqlens, chunk_indices, lower_bound, T, T_all,
    NT, HV: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr,
    USE_LOWER_BOUND: tl.constexpr, IS_VARLEN: tl.constexpr,
):  # fmt: skip
    """One program: chunk i_c (of a batch row, or of chunk_indices' list), value head i_hv,
    every BK-wide block of K in turn. dgc: the per-key dg of the gate cumsum, fp32 [B, T, HV,
    K]; g, dg: [B, T, HV, K] in the gate input's dtype; dA: [NC, HV] and dbias: [NC, HV, K]
    fp32 partial sums, one row per program's chunk (NC = B * NT, or NT when packed)."""
    i_c, i_bh = tl.program_id(0).to(tl.int64), tl.program_id(1).to(tl.int64)
    i_b, i_hv = i_bh // HV, i_bh % HV
    if IS_VARLEN:
        i_n = tl.load(chunk_indices + i_c * 2).to(tl.int64)
        i_t = tl.load(chunk_indices + i_c * 2 + 1).to(tl.int64)
        bos = tl.load(cu_seqlens + i_n).to(tl.int64)
        eos = tl.load(cu_seqlens + i_n + 1).to(tl.int64)
        T = eos - bos
        i_p = i_c  # the partial sums' row
    else:
        i_t = i_c
        bos = i_b * T
        i_p = i_b * NT + i_c

    o_t = i_t * BT + tl.arange(0, BT)
    m_t = o_t < T
    b_a = tl.load(A_log + i_hv).to(tl.float32)
    b_a = tl.exp(b_a) if USE_LOWER_BOUND else -tl.exp(b_a)
    b_terms = tl.zeros([BT, BK], dtype=tl.float32)  # dA_log's terms, reduced after the loop
    for i_k in range(tl.cdiv(K, BK)):
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        m = m_t[:, None] & m_k[None, :]
        offs = (bos + o_t)[:, None] * (HV * K) + i_hv * K + o_k[None, :]
        b_dyg = tl.cumsum(
            tl.load(dgc + offs, mask=m, other=0.0).to(tl.float32), axis=0, reverse=True
        )
        b_x = tl.load(g + offs, mask=m, other=0.0).to(tl.float32)
        b_x += tl.load(dt_bias + i_hv * K + o_k, mask=m_k, other=0.0).to(tl.float32)[None, :]
        if USE_LOWER_BOUND:
            b_s = tl.sigmoid(b_a * b_x)
            b_dx = b_dyg * (lower_bound * (b_s * (1.0 - b_s))) * b_a
            b_terms += tl.where(m, b_dx * b_x, 0.0)
        else:
            b_dx = b_a * (b_dyg * tl.sigmoid(b_x))
            b_terms += tl.where(m, b_dyg * (b_a * _softplus(b_x)), 0.0)
        b_dx = tl.where(m, b_dx, 0.0)
        tl.store(dg + offs, b_dx.to(dg.dtype.element_ty), mask=m)
        tl.store(dbias + (i_p * HV + i_hv) * K + o_k, tl.sum(b_dx, 0), mask=m_k)
    tl.store(dA + i_p * HV + i_hv, tl.sum(tl.sum(b_terms, 1), 0))

    if IS_VARLEN:
        # the list's last chunk zeroes the rows after the last sequence, if there are any
        if i_c == NT - 1:
            for i_z in range(tl.cdiv(T_all - eos, BT)):
                o_z = eos + i_z * BT + tl.arange(0, BT)
                for i_k in range(tl.cdiv(K, BK)):
                    o_k = i_k * BK + tl.arange(0, BK)
                    p_z = o_z[:, None] * (HV * K) + i_hv * K + o_k[None, :]
                    m_z = (o_z < T_all)[:, None] & (o_k < K)[None, :]
                    tl.store(dg + p_z, tl.zeros([BT, BK], dtype=dg.dtype.element_ty), mask=m_z)


def gate_tail(dgc, g, A_log, dt_bias, lower_bound=None, cu_seqlens=None, chunk_indices=None,
              chunk_size=64):  # fmt: skip
    """(dg, dA_log, ddt_bias): what fla 0.6.0's ``chunk_local_cumsum(dgc, chunk_size,
    reverse=True, cu_seqlens=, chunk_indices=)`` followed by ``kda_gate_bwd(g, A_log,
    dt_bias, dyg=that, lower_bound)`` return, in one kernel (module docstring).

    dgc: fp32 [B, T, HV, K], the gradient of the chunk-local gate cumsum; g: [B, T, HV, K],
    the raw gate input (fp32, bf16 or fp16); A_log: [HV]; dt_bias: [HV * K]; lower_bound: a
    negative float or None (the softplus form); cu_seqlens: [N + 1] int and chunk_indices:
    [NT, 2] int (fla's ``prepare_chunk_indices``) for a packed batch (B == 1), or both None;
    any strides. Returns dg like g, dA_log like A_log, ddt_bias like dt_bias. Raises
    ValueError for shapes other than these, a packed batch without chunk_indices or with
    B != 1, a chunk_size that is not a power of two of at least 16, or a KDA_GATE_TAIL_BK
    below 16 or not a power of two.
    """
    if dgc.dim() != 4 or tuple(g.shape) != tuple(dgc.shape):
        raise ValueError(
            f"dgc and g must be the same [B, T, HV, K], got {list(dgc.shape)} and {list(g.shape)}"
        )
    B, T, HV, K = g.shape
    if A_log is None or dt_bias is None or A_log.numel() != HV or dt_bias.numel() != HV * K:
        raise ValueError(f"A_log must have {HV} values and dt_bias {HV * K} (HV {HV}, K {K})")
    if BK < 16 or BK & (BK - 1):
        raise ValueError(f"KDA_GATE_TAIL_BK {BK} must be a power of two of at least 16")
    if chunk_size < 16 or chunk_size & (chunk_size - 1):
        raise ValueError(f"chunk_size {chunk_size} must be a power of two of at least 16")
    if (cu_seqlens is None) != (chunk_indices is None):
        raise ValueError("a packed batch needs both cu_seqlens and chunk_indices")
    if cu_seqlens is not None:
        if B != 1:
            raise ValueError(f"a packed batch has B == 1, got B {B}")
        if cu_seqlens.dim() != 1 or chunk_indices.dim() != 2 or chunk_indices.shape[1] != 2:
            raise ValueError(
                f"cu_seqlens must be [N + 1] and chunk_indices [NT, 2], got "
                f"{list(cu_seqlens.shape)} and {list(chunk_indices.shape)}"
            )
        cu_seqlens, chunk_indices = cu_seqlens.contiguous(), chunk_indices.contiguous()
    dgc, g = dgc.contiguous(), g.contiguous()
    NT = triton.cdiv(T, chunk_size) if cu_seqlens is None else chunk_indices.shape[0]
    NC = B * NT if cu_seqlens is None else NT
    dg = torch.empty_like(g)
    dA = g.new_empty(NC, HV, dtype=torch.float32)
    dbias = g.new_empty(NC, HV * K, dtype=torch.float32)
    if NC:
        kda_gate_tail_bwd_kernel[(NT, B * HV)](
            dgc, g, A_log.contiguous(), dt_bias.contiguous(), dg, dA, dbias,
            cu_seqlens, chunk_indices, lower_bound, T, T, NT, HV=HV, K=K, BT=chunk_size,
            BK=min(BK, triton.next_power_of_2(K)), USE_LOWER_BOUND=lower_bound is not None,
            IS_VARLEN=cu_seqlens is not None, num_warps=NUM_WARPS,
        )  # fmt: skip
    else:
        dg.zero_()
    return dg, dA.sum(0).view_as(A_log).type_as(A_log), dbias.sum(0).to(dt_bias)
