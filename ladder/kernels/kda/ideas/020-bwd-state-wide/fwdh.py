"""The backward's recompute of the chunk states (h and v_new) at a fixed, wider launch.

With recompute (fla's default, and every chain here), the backward runs the forward's state
pass again: fla 0.6.0's ``chunk_gated_delta_rule_fwd_kernel_h_blockdim64`` walks each
sequence's chunks for one (sequence, value head, BV-wide block of V), holding the state
S [BV, K] in fp32 registers, and writes every chunk's state h (bf16 [B, NT, HV, V, K]) and
v_new = u - w S^T (bf16 [B, T, HV, V]). fla's autotune list has BV 32 and 64 only; at prod
on the H200 it picks BV 64, 4 warps, 2 stages (1.800 ms; no 8- or 16-warp copy of its list
was faster, ``docs/results/kda-fla-configs-h200-20261130.json``).

Each program reads the chunk's K-wide tiles (kg and w, bf16 [64, K]) whatever its BV, so at
V 256 they are read V / BV times: at BV 64 four times, 2048 of the stage's about 4100 bytes
per token and value head. kda/008's forward walk has the same shape and was fastest at BV 128
and 8 warps (3.369 ms against 3.933 at BV 64 and 4 warps,
``docs/results/kda-fwdho-stage-h200-20261202.json``). Here fla's kernel, unchanged, is launched
at such a configuration directly: no autotuner, so also no tuning at a new T or packed
length. The wrapper is fla's ``chunk_gated_delta_rule_fwd_h`` (the non-graph path) with the
kernel's heuristics evaluated here.

Static sm90 compile at prod (K 128, V 256; ``tools/kda_wy_sass.py`` recipe): BV 128, 8 warps,
2 stages takes 230 registers, no stack, 112 KiB of shared memory (one program per SM); fla's
pick, BV 64, 4 warps, 2 stages, 190 registers, 88 KiB (two per SM).

K above MAX_K goes to fla's wrapper (its autotuner skips what does not fit).

Env knobs: KDA_FWDH20_BV (a power of two, at least 16, default 128), KDA_FWDH20_WARPS
(default 8), KDA_FWDH20_STAGES (default 2), for K <= MAX_K.
"""

from __future__ import annotations

import os

import torch
import triton
from ladder.kernels.kda.ideas.i006 import dhu

BV = int(os.environ.get("KDA_FWDH20_BV", "128"))
NUM_WARPS = int(os.environ.get("KDA_FWDH20_WARPS", "8"))
NUM_STAGES = int(os.environ.get("KDA_FWDH20_STAGES", "2"))
MAX_K = 128  # the widest K the fixed launch was compiled and sized for

__all__ = ["MAX_K", "fwd_h"]


def _check(kg, w, u, gk, h0, cu_seqlens) -> int:
    """N (the number of sequences) after checking what fwd_h documents, before any launch;
    ValueError naming the first thing that does not fit (fla's kernel reads past a tensor of
    another shape without an error)."""
    named = {"kg": kg, "w": w, "u": u, "gk": gk}
    for name, t in named.items():
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D, got {tuple(t.shape)}")
    B, T, H, K = kg.shape
    HV, V = u.shape[2], u.shape[3]
    if K > 256:
        raise ValueError(f"K {K} > 256: the state kernel holds at most 4 blocks of 64")
    if H < 1 or HV % H:
        raise ValueError(f"u's value heads HV {HV} must be a multiple of kg's heads {H}")
    for name, t, shape in (("u", u, (B, T, HV, V)), ("w", w, (B, T, HV, K)),
                           ("gk", gk, (B, T, HV, K))):  # fmt: skip
        if tuple(t.shape) != shape:
            raise ValueError(f"{name} must be {list(shape)}, got {list(t.shape)}")
    for name, t in named.items():
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous (fla's stages make it so)")
    if cu_seqlens is not None:
        if B != 1:
            raise ValueError(f"a packed batch has B == 1, got B {B}")
        if cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2:
            raise ValueError(f"cu_seqlens must be [N + 1], got {list(cu_seqlens.shape)}")
    N = B if cu_seqlens is None else cu_seqlens.numel() - 1
    if h0 is not None and tuple(h0.shape) != (N, HV, V, K):
        raise ValueError(f"h0 must be {[N, HV, V, K]}, got {list(h0.shape)}")
    return N


def fwd_h(kg, w, u, gk, h0, cu_seqlens=None, chunk_indices=None, chunk_size=64):
    """(h, v_new) as fla 0.6.0's ``chunk_gated_delta_rule_fwd_h`` returns them with ``gk``
    (the per-key gate cumsum, log2 units), no scalar gate, ``state_v_first=True`` and no
    final state: h [B, NT, HV, V, K] and v_new like u, both in kg's / u's dtype.

    kg: [B, T, H, K] (fla's w/u stage writes it per value head, H = HV); w, gk: [B, T, HV, K];
    u: [B, T, HV, V]; HV a multiple of H; h0: [N, HV, V, K] or None (any strides; read as
    fp32); cu_seqlens [N + 1] with B == 1 (and chunk_indices, fla's, made here when None) for
    a packed batch, its values taken as given (cu_seqlens[0] must be 0). K above MAX_K runs
    fla's wrapper. Raises ValueError, before any launch, for a tensor that is not 4-D or not
    of these shapes, one of kg, w, u, gk that is not contiguous, K > 256 (the kernel holds K
    in four 64-wide blocks), a packed batch with B != 1 or a cu_seqlens that is not
    [N + 1], or a KDA_FWDH20_BV below 16 or not a power of two."""
    from fla.ops.common.chunk_delta_h import (
        chunk_gated_delta_rule_fwd_h,
        chunk_gated_delta_rule_fwd_kernel_h_blockdim64,
    )
    from fla.ops.utils import prepare_chunk_indices, prepare_chunk_offsets

    h0 = h0.contiguous() if h0 is not None else None  # the kernel reads it row-major
    _check(kg, w, u, gk, h0, cu_seqlens)
    B, T, H, K = kg.shape
    HV, V = u.shape[2], u.shape[3]
    BT = chunk_size
    if K > MAX_K:
        h, v_new, _ = chunk_gated_delta_rule_fwd_h(
            k=kg, w=w, u=u, gk=gk, initial_state=h0, output_final_state=False,
            cu_seqlens=cu_seqlens, chunk_indices=chunk_indices, chunk_size=chunk_size,
            state_v_first=True,
        )  # fmt: skip
        return h, v_new
    if BV < 16 or BV & (BV - 1):
        raise ValueError(f"KDA_FWDH20_BV {BV} must be a power of two of at least 16 (tl.dot)")
    if cu_seqlens is None:
        N, NT, chunk_offsets = B, triton.cdiv(T, BT), None
    else:
        if chunk_indices is None:
            chunk_indices = prepare_chunk_indices(cu_seqlens, BT)
        N, NT = len(cu_seqlens) - 1, len(chunk_indices)
        chunk_offsets = prepare_chunk_offsets(cu_seqlens, BT)
    h = kg.new_empty(B, NT, HV, V, K)
    v_new = torch.empty_like(u)
    dhu._jit(chunk_gated_delta_rule_fwd_kernel_h_blockdim64)[(triton.cdiv(V, BV) * N * HV,)](
        k=kg, v=u, w=w, v_new=v_new, g=None, gk=gk, h=h, h0=h0, ht=None,
        cu_seqlens=cu_seqlens, chunk_offsets=chunk_offsets, T=T, H=H, HV=HV, K=K, V=V,
        BT=BT, BV=BV, USE_G=False, USE_GK=True, USE_INITIAL_STATE=h0 is not None,
        STORE_FINAL_STATE=False, SAVE_NEW_VALUE=True, STATE_V_FIRST=True,
        IS_VARLEN=cu_seqlens is not None, num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )  # fmt: skip
    return h, v_new
