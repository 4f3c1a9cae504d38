"""The state-gradient stage of chunk KDA (dh, dh0 and the local dv2) at a fixed, wider launch.

fla 0.6.0's ``chunk_gated_delta_rule_bwd_kernel_dhu_blockdim64`` walks each sequence's
chunks backwards for one (sequence, value head, BV-wide block of V), carrying dh [BV, K] in
fp32 registers. fla's autotune list for it has 2 and 4 warps only; at prod on the H200 it
picks BV 32, 4 warps, 3 stages (2.847 ms per call). With the list widened to 8 and 16 warps,
BV 64, 8 warps, 3 stages is fastest at 2.420 ms (`tools/kda_fla_configs.py`,
docs/results/kda-fla-configs-h200-20261130.json). Here the same kernel, fla's, is launched
at that configuration directly: no autotuner, so also no tuning at a new T or packed
length. The wrapper is fla's ``chunk_gated_delta_rule_bwd_dhu`` (the non-graph path) with
the kernel's heuristics evaluated here.

The fixed launch holds K in registers and shared memory as fla's kernel does: at BV 64 and
3 stages it needs 200 KiB of shared memory at K 128, 272 KiB at K 192 and 344 KiB at
K 256, past the H200's 227 KiB (static sm90 compiles). So K above MAX_K goes to fla's
wrapper, whose autotuner skips what does not fit.

Env knobs: KDA_DHU_BV (32 or 64), KDA_DHU_WARPS, KDA_DHU_STAGES (for K <= MAX_K).
"""

from __future__ import annotations

import os

import torch
import triton

BV = int(os.environ.get("KDA_DHU_BV", "64"))
NUM_WARPS = int(os.environ.get("KDA_DHU_WARPS", "8"))
NUM_STAGES = int(os.environ.get("KDA_DHU_STAGES", "3"))
MAX_K = 128  # the widest K the fixed launch was compiled and sized for


def _jit(kernel):
    """The triton.jit function under fla's heuristics and autotuning wrappers (on Triton's
    CPU interpreter, the interpreted function that stands for it)."""
    from triton.runtime.interpreter import InterpretedFunction

    while not isinstance(kernel, (triton.runtime.jit.JITFunction, InterpretedFunction)):
        kernel = kernel.fn
    return kernel


def bwd_dhu(q, k, w, do, dv, gk, h0, dht, scale, cu_seqlens=None, chunk_indices=None,
            chunk_size=64):  # fmt: skip
    """(dh, dh0, dv2) as fla 0.6.0's ``chunk_gated_delta_rule_bwd_dhu`` returns them with
    ``gk`` (the per-key gate, log2 units), no scalar gate and ``state_v_first=True``: dh
    [B, NT, HV, V, K] in q's dtype, dh0 like h0 in fp32 (or None), dv2 like dv.

    q, k: [B, T, H, K]; w, gk: [B, T, HV, K]; do, dv: [B, T, HV, V]; h0, dht: [N, HV, V, K]
    fp32 or None. K above MAX_K runs fla's wrapper (module docstring). Raises ValueError for
    K > 256 (the kernel holds K in four 64-wide blocks) or a packed batch with B != 1."""
    from fla.ops.common.chunk_delta_h import (
        chunk_gated_delta_rule_bwd_dhu,
        chunk_gated_delta_rule_bwd_kernel_dhu_blockdim64,
    )
    from fla.ops.utils import prepare_chunk_indices, prepare_chunk_offsets

    B, T, H, K = q.shape
    HV, V = do.shape[2], do.shape[3]
    BT = chunk_size
    if K > 256:
        raise ValueError(f"K {K} > 256: the state-gradient kernel holds at most 4 blocks of 64")
    if K > MAX_K:
        return chunk_gated_delta_rule_bwd_dhu(
            q=q, k=k, w=w, gk=gk, h0=h0, dht=dht, do=do, dv=dv, scale=scale,
            cu_seqlens=cu_seqlens, chunk_size=chunk_size, chunk_indices=chunk_indices,
            state_v_first=True,
        )  # fmt: skip
    if cu_seqlens is None:
        N, NT, chunk_offsets = B, triton.cdiv(T, BT), None
    else:
        if B != 1:
            raise ValueError(f"a packed batch has B == 1, got B {B}")
        if chunk_indices is None:
            chunk_indices = prepare_chunk_indices(cu_seqlens, BT)
        N, NT = len(cu_seqlens) - 1, len(chunk_indices)
        chunk_offsets = prepare_chunk_offsets(cu_seqlens, BT)
    dh = q.new_empty(B, NT, HV, V, K)
    dh0 = torch.empty_like(h0, dtype=torch.float32) if h0 is not None else None
    dv2 = torch.empty_like(dv)
    _jit(chunk_gated_delta_rule_bwd_kernel_dhu_blockdim64)[(triton.cdiv(V, BV) * N * HV,)](
        q=q, k=k, w=w, g=None, gk=gk, dht=dht, dh0=dh0, do=do, dh=dh, dv=dv, dv2=dv2,
        cu_seqlens=cu_seqlens, chunk_offsets=chunk_offsets, scale=scale, T=T, H=H, HV=HV, K=K,
        V=V, BT=BT, BV=BV, USE_G=False, USE_GK=gk is not None,
        USE_INITIAL_STATE=dh0 is not None, USE_FINAL_STATE_GRADIENT=dht is not None,
        STATE_V_FIRST=True, IS_VARLEN=cu_seqlens is not None, num_warps=NUM_WARPS,
        num_stages=NUM_STAGES,
    )  # fmt: skip
    return dh, dh0, dv2
