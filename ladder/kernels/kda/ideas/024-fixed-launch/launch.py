"""fla 0.6.0's autotuned kernels of kda/022's chain, launched at fixed configurations.

kda/022's chain still reaches seven of fla's kernels through fla's autotuner: the L2 norm
(forward, for q and k) and its backward, the gate's chunk cumsum (forward, and again in the
backward), the off-diagonal tiles and solve, the w/u kernel (forward without q, and the
backward's recompute with q), dAv, and the backward's recompute of the chunk states. Each
autotuned launch times every configuration of its list at a new key: a new head count, K
or V, and for the L2 norm a new bucket of token counts (fla keys it on
NB = cdiv(rows, 65536), so a new T can re-tune it). Each call also pays the autotuner's
host work (the key built from every argument, a cache lookup, the heuristics).

Here each of those kernels, fla's own, is launched directly at one configuration: the one
fla's autotuner picked at prod (B16 T8192 H16 K128 V256, bf16) on the H200, read from the
autotune cache of record ``20261205T051110Z-dd4482b7``'s run (kda/022's prod bench) and
kept in ``docs/results/kda-fla-picks-h200-20261205.json``. The wrappers are fla's
(``l2norm_fwd``, ``l2norm_bwd``, ``kda_gate_chunk_cumsum``, ``recompute_w_u_fwd``,
``chunk_kda_bwd_dAv``, ``chunk_gated_delta_rule_fwd_h``) with the kernels' heuristics
evaluated here and the sm90 branches of their block sizes taken.

Configurations (the knob's default is the H200 prod pick; ms is that pick's time there):

| kernel | knobs | pick | ms |
| --- | --- | --- | --- |
| l2norm_fwd_kernel | KDA_L2F_BT, KDA_L2F_WARPS, KDA_L2F_STAGES | BT 8, 4 warps, 3 stages | 0.260 |
| l2norm_bwd_kernel | KDA_L2B_BT, KDA_L2B_WARPS, KDA_L2B_STAGES | BT 64, 8 warps, 3 stages | 0.488 |
| kda_gate_chunk_cumsum_vector_kernel | KDA_GCS_BS, KDA_GCS_WARPS, KDA_GCS_STAGES | BS 64, 4 warps, 3 stages | 0.430 |
| chunk_kda_fwd_kernel_inter_solve_fused | KDA_SOLVE_BK, KDA_SOLVE_WARPS, KDA_SOLVE_STAGES | BK 32, 1 warp, 3 stages | 1.569 |
| recompute_w_u_fwd_kda_kernel, no q | KDA_WUF_WARPS, KDA_WUF_STAGES | 4 warps, 3 stages | 1.347 |
| recompute_w_u_fwd_kda_kernel, with q | KDA_WUB_WARPS, KDA_WUB_STAGES | 8 warps, 4 stages | 1.854 |
| chunk_kda_bwd_kernel_dAv | KDA_DAV_WARPS, KDA_DAV_STAGES | 4 warps, 3 stages | 1.002 |
| chunk_gated_delta_rule_fwd_kernel_h_blockdim64 | KDA_FH_BV, KDA_FH_WARPS, KDA_FH_STAGES | BV 64, 4 warps, 2 stages | 1.796 |

Every configuration is one of fla's own autotune list for that kernel, so it compiles and
fits wherever fla's list does for the box's shapes (K <= 128, V <= 512 here; kda/022's chain
sends K above 128 to kda/014's forward, and ``fwd_h`` sends it to fla's wrapper, whose
autotuner skips what does not fit in shared memory). What a fixed launch gives up: at a shape far from
prod, fla's autotuner may find a faster configuration.

Errors: each function raises ValueError, before any launch, for the shape mismatches named
in its docstring; anything else is fla's kernel's.
"""

from __future__ import annotations

import functools
import os

import torch
import triton
from ladder.kernels.kda.ideas.i020 import fwdh

__all__ = ["dav", "fwd_h", "gate_cumsum", "jit", "l2norm_bwd", "l2norm_fwd", "solve_launch", "w_u"]


L2F_BT = int(os.environ.get("KDA_L2F_BT", "8"))
L2F_WARPS = int(os.environ.get("KDA_L2F_WARPS", "4"))
L2F_STAGES = int(os.environ.get("KDA_L2F_STAGES", "3"))
L2B_BT = int(os.environ.get("KDA_L2B_BT", "64"))
L2B_WARPS = int(os.environ.get("KDA_L2B_WARPS", "8"))
L2B_STAGES = int(os.environ.get("KDA_L2B_STAGES", "3"))
GCS_BS = int(os.environ.get("KDA_GCS_BS", "64"))
GCS_WARPS = int(os.environ.get("KDA_GCS_WARPS", "4"))
GCS_STAGES = int(os.environ.get("KDA_GCS_STAGES", "3"))
SOLVE_BK = int(os.environ.get("KDA_SOLVE_BK", "32"))
SOLVE_WARPS = int(os.environ.get("KDA_SOLVE_WARPS", "1"))
SOLVE_STAGES = int(os.environ.get("KDA_SOLVE_STAGES", "3"))
WUF_WARPS = int(os.environ.get("KDA_WUF_WARPS", "4"))
WUF_STAGES = int(os.environ.get("KDA_WUF_STAGES", "3"))
WUB_WARPS = int(os.environ.get("KDA_WUB_WARPS", "8"))
WUB_STAGES = int(os.environ.get("KDA_WUB_STAGES", "4"))
DAV_WARPS = int(os.environ.get("KDA_DAV_WARPS", "4"))
DAV_STAGES = int(os.environ.get("KDA_DAV_STAGES", "3"))
FH_BV = int(os.environ.get("KDA_FH_BV", "64"))
FH_WARPS = int(os.environ.get("KDA_FH_WARPS", "4"))
FH_STAGES = int(os.environ.get("KDA_FH_STAGES", "2"))

MAX_D = 512  # fla's L2 norm takes its blocked kernel up to D 512, its row kernel above
# fla's L2 norm kernels take NB = cdiv(rows, 65536) as a constexpr only for their autotune
# key; their bodies never read it. A fixed value keeps one compiled kernel for every T (fla's
# value would compile a new one at each new bucket of token counts).
NB = 1


@functools.cache
def jit(kernel):
    """The triton.jit function under fla's heuristics and autotuning wrappers (on Triton's
    CPU interpreter, the interpreted function that stands for it); found once per kernel,
    not on every call."""
    from triton.runtime.interpreter import InterpretedFunction

    while not isinstance(kernel, (triton.runtime.jit.JITFunction, InterpretedFunction)):
        kernel = kernel.fn
    return kernel


def _check_batch(shapes: dict, H: int, HV: int, B: int, cu_seqlens) -> None:
    """ValueError, before any launch, naming the first tensor of ``shapes`` ({name: (tensor,
    expected shape)}) of another rank or shape or not contiguous, an HV that is not a
    multiple of H, or a packed batch with B != 1 (fla's kernels read past a tensor of another
    shape or layout without an error)."""
    for name, (t, want) in shapes.items():
        if t.dim() != len(want) or tuple(t.shape) != tuple(want):
            raise ValueError(f"{name} must be {list(want)}, got {list(t.shape)}")
    for name, (t, _) in shapes.items():
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous (the chain makes its tensors so)")
    if H < 1 or HV % H:
        raise ValueError(f"the value heads HV {HV} must be a multiple of the heads H {H}")
    if cu_seqlens is not None and B != 1:
        raise ValueError("a packed batch (cu_seqlens given) has B == 1")


def _dims(name: str, t: torch.Tensor, n: int) -> None:
    if t.dim() != n:
        raise ValueError(f"{name} must be {n}-D, got {list(t.shape)}")


def l2norm_fwd(x: torch.Tensor, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, rstd) as fla 0.6.0's ``l2norm_fwd(x, eps)``: y = x / sqrt(sum(x^2) + eps) over the
    last dimension, in x's dtype and shape; rstd fp32, x's shape without its last dimension.
    x: [..., D], contiguous. Raises ValueError for D > 512 (fla's row kernel's range, which
    the box never reaches) or a non-contiguous x."""
    from fla.modules.norm.l2norm import l2norm_fwd_kernel

    if x.dim() < 1 or x.shape[-1] < 1:
        raise ValueError(f"x must be [..., D] with D >= 1, got {list(x.shape)}")
    D = x.shape[-1]
    if D > MAX_D:
        raise ValueError(f"D {D} > {MAX_D}: the fixed launch covers fla's blocked L2 norm only")
    if not x.is_contiguous():
        raise ValueError("x must be contiguous (the chain makes its inputs so)")
    x2 = x.view(-1, D)
    T = x2.shape[0]
    y = torch.empty_like(x2)
    rstd = torch.empty(T, dtype=torch.float32, device=x.device)
    jit(l2norm_fwd_kernel)[(triton.cdiv(T, L2F_BT),)](
        x2, y, rstd, eps, T, D=D, BD=triton.next_power_of_2(D), NB=NB,
        BT=L2F_BT, num_warps=L2F_WARPS, num_stages=L2F_STAGES,
    )  # fmt: skip
    return y.view(x.shape), rstd.view(x.shape[:-1])


def l2norm_bwd(
    y: torch.Tensor, rstd: torch.Tensor, dy: torch.Tensor, eps: float = 1e-6
) -> torch.Tensor:
    """dx as fla 0.6.0's ``l2norm_bwd(y, rstd, dy, eps)``, in y's dtype and shape. y, dy:
    [..., D] (dy any float dtype, same shape), rstd fp32 y's shape without D, all contiguous.
    Raises ValueError for D > 512, mismatched shapes or a non-contiguous input."""
    from fla.modules.norm.l2norm import l2norm_bwd_kernel

    if y.dim() < 1 or y.shape[-1] < 1:
        raise ValueError(f"y must be [..., D] with D >= 1, got {list(y.shape)}")
    D = y.shape[-1]
    if D > MAX_D:
        raise ValueError(f"D {D} > {MAX_D}: the fixed launch covers fla's blocked L2 norm only")
    if rstd.dtype != torch.float32:
        raise ValueError(f"rstd must be fp32 (l2norm_fwd's), got {rstd.dtype}")
    if dy.shape != y.shape or rstd.shape != y.shape[:-1]:
        raise ValueError(
            f"dy {tuple(dy.shape)} and rstd {tuple(rstd.shape)} must match y {tuple(y.shape)}"
        )
    if not (y.is_contiguous() and dy.is_contiguous() and rstd.is_contiguous()):
        raise ValueError("y, rstd and dy must be contiguous")
    y2, dy2 = y.view(-1, D), dy.view(-1, D)
    T = y2.shape[0]
    dx = torch.empty_like(y2)
    jit(l2norm_bwd_kernel)[(triton.cdiv(T, L2B_BT),)](
        y2, rstd, dy2, dx, eps, T, D=D, BD=triton.next_power_of_2(D), NB=NB,
        BT=L2B_BT, num_warps=L2B_WARPS, num_stages=L2B_STAGES,
    )  # fmt: skip
    return dx.view(y.shape)


def gate_cumsum(
    g, A_log, dt_bias, scale, chunk_size, cu_seqlens=None, chunk_indices=None, lower_bound=None
):
    """fla 0.6.0's ``kda_gate_chunk_cumsum`` (fp32 output, forward cumsum): the gate
    -exp(A_log) * softplus(g + dt_bias) (or lower_bound * sigmoid(exp(A_log) * (g +
    dt_bias)) with a lower bound), summed within each chunk of ``chunk_size`` tokens and
    times ``scale``. g: [B, T, H, S] contiguous; A_log [H] and dt_bias [H * S] or None;
    cu_seqlens [N + 1] with B == 1 and chunk_indices (fla's, made here when None) for a
    packed batch. Returns fp32 [B, T, H, S]. Raises ValueError for a g that is not 4-D or
    not contiguous, an A_log or dt_bias of another size or not contiguous, or a packed batch
    with B != 1."""
    from fla.ops.kda.gate import kda_gate_chunk_cumsum_vector_kernel
    from fla.ops.utils.index import prepare_chunk_indices

    if g.dim() != 4 or not g.is_contiguous():
        raise ValueError(f"g must be a contiguous [B, T, H, S] tensor, got {tuple(g.shape)}")
    B, T, H, S = g.shape
    for name, t, n in (("A_log", A_log, H), ("dt_bias", dt_bias, H * S)):
        if t is not None and (t.numel() != n or not t.is_contiguous()):
            raise ValueError(
                f"{name} must be a contiguous tensor of {n} elements, got {list(t.shape)}"
            )
    if cu_seqlens is not None and B != 1:
        raise ValueError(f"a packed batch has B == 1, got B {B}")
    if cu_seqlens is not None and chunk_indices is None:
        chunk_indices = prepare_chunk_indices(cu_seqlens, chunk_size)
    NT = triton.cdiv(T, chunk_size) if cu_seqlens is None else len(chunk_indices)
    o = torch.empty_like(g, dtype=torch.float32)
    jit(kda_gate_chunk_cumsum_vector_kernel)[(triton.cdiv(S, GCS_BS) * NT, B * H)](
        g, A_log, dt_bias, o, scale, cu_seqlens, chunk_indices, lower_bound, T, H=H, S=S,
        BT=chunk_size, BS=GCS_BS, REVERSE=False, HAS_A=A_log is not None,
        HAS_BIAS=dt_bias is not None, HAS_SCALE=scale is not None,
        IS_VARLEN=cu_seqlens is not None, USE_LOWER_BOUND=lower_bound is not None,
        USE_GRAPH=False, num_warps=GCS_WARPS, num_stages=GCS_STAGES,
    )  # fmt: skip
    return o


def solve_launch(grid, **kwargs) -> None:
    """fla 0.6.0's ``chunk_kda_fwd_kernel_inter_solve_fused`` at the fixed configuration:
    ``kwargs`` are the keyword arguments its autotuned launch takes (kda/022's
    ``intra_fwd.fwd_intra`` passes them), BK and the launch options are added here."""
    from fla.ops.kda.chunk_intra import chunk_kda_fwd_kernel_inter_solve_fused

    jit(chunk_kda_fwd_kernel_inter_solve_fused)[grid](
        **kwargs, BK=SOLVE_BK, IS_VARLEN=kwargs["cu_seqlens"] is not None,
        num_warps=SOLVE_WARPS, num_stages=SOLVE_STAGES,
    )  # fmt: skip


def w_u(k, v, beta, A, gk, q=None, cu_seqlens=None, chunk_indices=None):
    """(w, u, qg, kg) as fla 0.6.0's ``recompute_w_u_fwd(k, v, beta, A, gk, q, cu_seqlens,
    chunk_indices)``: w, kg (and qg when q is given, else None) [B, T, HV, K] in k's dtype,
    u like v. k (and q): [B, T, H, K]; v: [B, T, HV, V]; beta: [B, T, HV]; A: [B, T, HV, BT];
    gk: [B, T, HV, K] fp32; all contiguous; HV a multiple of H; a packed batch (cu_seqlens)
    has B == 1. Launched at the forward's pick without q and the backward's with it. Raises
    ValueError, before any launch, for a tensor of another rank or shape, one that is not
    contiguous, an HV that is not a multiple of H, a chunk size (A's last dimension) that is
    not a power of two of at least 16, or a packed batch with B != 1."""
    from fla.ops.kda.wy_fast import recompute_w_u_fwd_kda_kernel
    from fla.ops.utils.index import prepare_chunk_indices

    for name, t in (("k", k), ("v", v), ("A", A), ("gk", gk)):
        _dims(name, t, 4)
    B, T, H, K = k.shape
    HV, V = v.shape[2], v.shape[3]
    BT = A.shape[-1]
    if BT < 16 or BT & (BT - 1):
        raise ValueError(
            f"A's last dimension (the chunk size) must be a power of two >= 16, got {BT}"
        )
    shapes = {"k": (k, (B, T, H, K)), "v": (v, (B, T, HV, V)), "beta": (beta, (B, T, HV)),
              "A": (A, (B, T, HV, BT)), "gk": (gk, (B, T, HV, K))}  # fmt: skip
    if q is not None:
        shapes["q"] = (q, (B, T, H, K))
    _check_batch(shapes, H, HV, B, cu_seqlens)
    if cu_seqlens is not None and chunk_indices is None:
        chunk_indices = prepare_chunk_indices(cu_seqlens, BT)
    NT = triton.cdiv(T, BT) if cu_seqlens is None else len(chunk_indices)
    w = torch.empty(B, T, HV, K, device=k.device, dtype=k.dtype)
    u = torch.empty_like(v)
    qg = torch.empty(B, T, HV, K, device=k.device, dtype=k.dtype) if q is not None else None
    kg = torch.empty(B, T, HV, K, device=k.device, dtype=k.dtype)
    warps, stages = (WUF_WARPS, WUF_STAGES) if q is None else (WUB_WARPS, WUB_STAGES)
    jit(recompute_w_u_fwd_kda_kernel)[(NT, B * HV)](
        q, k, qg, kg, v, beta, w, u, A, gk, cu_seqlens, chunk_indices, T, H=H, HV=HV, K=K,
        V=V, BT=BT, BK=64, BV=64, STORE_QG=q is not None, STORE_KG=True,
        IS_VARLEN=cu_seqlens is not None, USE_GRAPH=False, num_warps=warps, num_stages=stages,
    )  # fmt: skip
    return w, u, qg, kg


def dav(q, k, v, do, A, scale, cu_seqlens=None, chunk_size=64, chunk_indices=None):
    """(dA fp32 [B, T, HV, BT], dv like do) as fla 0.6.0's ``chunk_kda_bwd_dAv`` on sm90
    (its block sizes min(max(next_pow2(K or V), 16), 128)). q, k: [B, T, H, K]; v, do:
    [B, T, HV, V]; A: [B, T, HV, chunk_size]; all contiguous; HV a multiple of H; a packed
    batch (cu_seqlens) has B == 1. Raises ValueError, before any launch, for a tensor of
    another rank or shape, one that is not contiguous, an HV that is not a multiple of H, a
    chunk_size that is not a power of two of at least 16, or a packed batch with B != 1."""
    from fla.ops.kda.chunk_bwd import chunk_kda_bwd_kernel_dAv
    from fla.ops.utils.index import prepare_chunk_indices

    for name, t in (("q", q), ("k", k), ("v", v), ("do", do), ("A", A)):
        _dims(name, t, 4)
    B, T, H, K = k.shape
    HV, V = do.shape[2], do.shape[3]
    BT = chunk_size
    if not isinstance(BT, int) or BT < 16 or BT & (BT - 1):
        raise ValueError(f"chunk_size must be a power of two >= 16, got {BT!r}")
    shapes = {"k": (k, (B, T, H, K)), "q": (q, (B, T, H, K)), "v": (v, (B, T, HV, V)),
              "do": (do, (B, T, HV, V)), "A": (A, (B, T, HV, BT))}  # fmt: skip
    _check_batch(shapes, H, HV, B, cu_seqlens)
    if cu_seqlens is not None and chunk_indices is None:
        chunk_indices = prepare_chunk_indices(cu_seqlens, BT)
    NT = triton.cdiv(T, BT) if cu_seqlens is None else len(chunk_indices)
    dA = v.new_empty(B, T, HV, BT, dtype=torch.float)
    dv = torch.empty_like(do)
    jit(chunk_kda_bwd_kernel_dAv)[(NT, B * HV)](
        q=q, k=k, v=v, A=A, do=do, dv=dv, dA=dA, cu_seqlens=cu_seqlens,
        chunk_indices=chunk_indices, scale=scale, T=T, H=H, HV=HV, K=K, V=V, BT=BT,
        BK=min(max(triton.next_power_of_2(K), 16), 128), BV=min(max(triton.next_power_of_2(V), 16), 128),
        IS_VARLEN=cu_seqlens is not None, num_warps=DAV_WARPS, num_stages=DAV_STAGES,
    )  # fmt: skip
    return dA, dv


def fwd_h(kg, w, u, gk, h0, cu_seqlens=None, chunk_indices=None, chunk_size=64):
    """(h, v_new) as fla 0.6.0's ``chunk_gated_delta_rule_fwd_h`` returns them with ``gk``, no
    scalar gate, ``state_v_first=True`` and no final state: kda/020's ``fwdh.fwd_h`` (shapes,
    dtypes and the ValueErrors of its checks, made before any launch) at this module's
    KDA_FH_* launch, fla's prod pick. K above kda/020's ``fwdh.MAX_K`` runs fla's wrapper."""
    from fla.ops.common.chunk_delta_h import (
        chunk_gated_delta_rule_fwd_h,
        chunk_gated_delta_rule_fwd_kernel_h_blockdim64,
    )
    from fla.ops.utils import prepare_chunk_indices, prepare_chunk_offsets

    h0 = h0.contiguous() if h0 is not None else None  # the kernel reads it row-major
    fwdh._check(kg, w, u, gk, h0, cu_seqlens)
    B, T, H, K = kg.shape
    HV, V = u.shape[2], u.shape[3]
    BT = chunk_size
    if K > fwdh.MAX_K:
        h, v_new, _ = chunk_gated_delta_rule_fwd_h(
            k=kg, w=w, u=u, gk=gk, initial_state=h0, output_final_state=False,
            cu_seqlens=cu_seqlens, chunk_indices=chunk_indices, chunk_size=chunk_size,
            state_v_first=True,
        )  # fmt: skip
        return h, v_new
    if cu_seqlens is None:
        N, NT, chunk_offsets = B, triton.cdiv(T, BT), None
    else:
        if chunk_indices is None:
            chunk_indices = prepare_chunk_indices(cu_seqlens, BT)
        N, NT = len(cu_seqlens) - 1, len(chunk_indices)
        chunk_offsets = prepare_chunk_offsets(cu_seqlens, BT)
    h = kg.new_empty(B, NT, HV, V, K)
    v_new = torch.empty_like(u)
    jit(chunk_gated_delta_rule_fwd_kernel_h_blockdim64)[(triton.cdiv(V, FH_BV) * N * HV,)](
        k=kg, v=u, w=w, v_new=v_new, g=None, gk=gk, h=h, h0=h0, ht=None,
        cu_seqlens=cu_seqlens, chunk_offsets=chunk_offsets, T=T, H=H, HV=HV, K=K, V=V,
        BT=BT, BV=FH_BV, USE_G=False, USE_GK=True, USE_INITIAL_STATE=h0 is not None,
        STORE_FINAL_STATE=False, SAVE_NEW_VALUE=True, STATE_V_FIRST=True,
        IS_VARLEN=cu_seqlens is not None, num_warps=FH_WARPS, num_stages=FH_STAGES,
    )  # fmt: skip
    return h, v_new
